// The journal keeps every complete record and nothing torn: kill -9 of a
// writer at random moments, and damaged tails, leave a prefix of the records.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "daemon/journal.h"

using namespace geoloco;
using namespace geoloco::daemon;

namespace {
std::string temp_path(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("geoloco-journal-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove(p);
  return p.string();
}
}  // namespace

TEST_CASE("journal records survive a reopen in order") {
  const auto path = temp_path("basic");
  {
    auto j = Journal::open(path);
    REQUIRE(j.ok());
    CHECK(j->records().empty());
    for (int r = 1; r <= 3; ++r) REQUIRE(j->append({{"round", r}, {"kind", "plan"}}).ok());
  }
  auto j = Journal::open(path);
  REQUIRE(j.ok());
  REQUIRE(j->records().size() == 3);
  CHECK(j->records()[2]["round"] == 3);
  CHECK(j->dropped_bytes() == 0);
  std::filesystem::remove(path);
}

TEST_CASE("a torn or corrupted tail is dropped, and appends continue cleanly") {
  const auto path = temp_path("torn");
  {
    auto j = Journal::open(path);
    REQUIRE(j.ok());
    REQUIRE(j->append({{"round", 1}}).ok());
    REQUIRE(j->append({{"round", 2}}).ok());
  }
  {
    std::ofstream(path, std::ios::app) << "0123456789abcdef {\"round\": 3";  // crash mid-append
  }
  auto j = Journal::open(path);
  REQUIRE(j.ok());
  CHECK(j->records().size() == 2);
  CHECK(j->dropped_bytes() > 0);
  REQUIRE(j->append({{"round", 3}}).ok());
  auto again = Journal::open(path);
  REQUIRE(again.ok());
  REQUIRE(again->records().size() == 3);
  CHECK(again->records()[2]["round"] == 3);

  // A flipped byte in the middle record cuts the journal there.
  std::string content;
  {
    std::ifstream in(path);
    content.assign(std::istreambuf_iterator<char>(in), {});
  }
  content[content.find("\"round\":2") + 9] = '7';
  std::ofstream(path, std::ios::trunc) << content;
  auto damaged = Journal::open(path);
  REQUIRE(damaged.ok());
  CHECK(damaged->records().size() == 1);
  std::filesystem::remove(path);
}

TEST_CASE("kill -9 of a writer at random moments leaves a prefix of complete records") {
  const auto path = temp_path("kill");
  std::uint64_t expected_at_least = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      auto j = Journal::open(path);
      if (!j.ok()) ::_exit(2);
      std::uint64_t next = j->records().size();
      for (;;) {
        if (!j->append({{"seq", next++}, {"pad", std::string(100 + next % 300, 'x')}}).ok()) ::_exit(3);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + (trial * 7919) % 20000));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    auto j = Journal::open(path);
    REQUIRE(j.ok());
    // Every record is complete and they are 0, 1, 2, ... with no gap.
    for (std::size_t i = 0; i < j->records().size(); ++i) REQUIRE(j->records()[i]["seq"] == i);
    CHECK(j->records().size() >= expected_at_least);
    expected_at_least = j->records().size();
  }
  CHECK(expected_at_least > 0);
  std::filesystem::remove(path);
}

TEST_CASE("a whole, hashed record that geolocod does not write is refused with its line and field, never read") {
  const auto path = temp_path("foreign");
  {
    auto j = Journal::open(path);
    REQUIRE(j.ok());
    REQUIRE(j->append({{"type", "plan"}, {"round", 1}, {"attempt", 0}}).ok());
    // Records of a type this version does not know, or with no type, are kept and skipped.
    REQUIRE(j->append({{"type", "later_version"}, {"round", "x"}}).ok());
    REQUIRE(j->append({{"round", 2}}).ok());
    // Refused before anything is written: this site could not read it back.
    const Status bad = j->append({{"type", "committed"}, {"round", 2}, {"final", "yes"}});
    CHECK(bad.code() == Err::internal);
    CHECK(bad.message() ==
          "a journal record this site would not read back: a 'committed' record's 'final' is "
          "string, not true or false");
  }
  REQUIRE(Journal::open(path).ok());
  {
    // What another program (or a hand) could append: the hash is right, the record is not.
    std::ofstream(path, std::ios::app) << hashed_line(R"({"type":"committed","round":"7","anchor_digest":"x"})")
                                       << "\n";
  }
  auto j = Journal::open(path);
  REQUIRE_FALSE(j.ok());
  CHECK(j.status().code() == Err::malformed);
  CHECK(j.status().message() ==
        "the journal " + path +
            ", record 4: a 'committed' record's 'round' is string, not an unsigned integer: it "
            "was not written by this geolocod (another version, or edited by hand); move the job's folder aside and "
            "the site takes the committed state from a peer");
  CHECK(check_journal_record(nlohmann::json::array({1, 2})).message() == "a record is array, not a JSON object");
  CHECK(check_journal_record({{"type", 3}}).message() == "a record's 'type' is number, not a string");
  CHECK(check_journal_record({{"type", "office"}, {"epoch", -1}, {"coordinator", "a"}}).message() ==
        "a 'office' record's 'epoch' is number, not an unsigned integer");
  CHECK(check_journal_record({{"type", "pending"}, {"none", true}}).ok());
  std::filesystem::remove(path);
}

TEST_CASE("an unopenable journal is an io error naming the path") {
  auto j = Journal::open("/nonexistent-dir/geoloco/journal");
  REQUIRE_FALSE(j.ok());
  CHECK(j.status().code() == Err::io);
  CHECK(j.status().message().find("/nonexistent-dir/geoloco/journal") != std::string::npos);
}

TEST_CASE("a journal's summary: the last commit, and the attempt after the last plan of the round in flight") {
  using nlohmann::json;
  CHECK(summarize_journal({}).round == 0);
  CHECK(summarize_journal({}).next_attempt == 0);
  std::vector<json> records{
      {{"type", "plan"}, {"round", 1}, {"attempt", 0}},
      {{"type", "committed"}, {"round", 1}, {"anchor_digest", "00000000000000a1"}, {"tokens", 640}, {"final", false}},
      {{"type", "plan"}, {"round", 2}, {"attempt", 0}},
      {{"type", "plan"}, {"round", 2}, {"attempt", 1}},
  };
  auto s = summarize_journal(records);
  CHECK(s.round == 1);
  CHECK(s.digest == "00000000000000a1");
  CHECK(s.tokens == 640);
  CHECK_FALSE(s.final);
  CHECK(s.next_attempt == 2);  // round 2's attempts 0 and 1 were sent: the next is 2
  records.push_back(
      {{"type", "committed"}, {"round", 2}, {"anchor_digest", "00000000000000a2"}, {"tokens", 1280}, {"final", true}});
  s = summarize_journal(records);
  CHECK(s.round == 2);
  CHECK(s.tokens == 1280);
  CHECK(s.final);
  CHECK(s.next_attempt == 0);  // round 3 was never planned
  // Which attempt committed each round: the last one planned before it.
  REQUIRE(s.commits.size() == 2);
  CHECK((s.commits.at(1).digest == "00000000000000a1" && s.commits.at(1).attempt == 0));
  CHECK((s.commits.at(2).digest == "00000000000000a2" && s.commits.at(2).attempt == 1));
}

TEST_CASE("a round older than the last, journaled after it, is listed without moving the last") {
  using nlohmann::json;
  // A site installed round 6 and kept rounds 4..6 as entries in its round
  // log: rounds 4 and 5 are journaled after 6 was announced to it.
  const std::vector<json> records{
      {{"type", "committed"}, {"round", 3}, {"anchor_digest", "00000000000000a3"}, {"tokens", 30}},
      {{"type", "committed"},
       {"round", 6},
       {"anchor_digest", "00000000000000a6"},
       {"tokens", 60},
       {"via", "announced"}},
      {{"type", "committed"},
       {"round", 4},
       {"anchor_digest", "00000000000000a4"},
       {"tokens", 40},
       {"attempt", 2u},
       {"via", "state_sync"}},
      {{"type", "committed"},
       {"round", 5},
       {"anchor_digest", "00000000000000a5"},
       {"tokens", 50},
       {"attempt", 0u},
       {"via", "state_sync"}},
      {{"type", "committed"}, {"round", 4}, {"anchor_digest", "00000000000000ff"}, {"tokens", 40}, {"via", "again"}},
  };
  const auto s = summarize_journal(records);
  CHECK(s.round == 6);
  CHECK(s.digest == "00000000000000a6");
  CHECK(s.tokens == 60);
  REQUIRE(s.commits.size() == 4);
  CHECK((s.commits.at(4).digest == "00000000000000a4" && s.commits.at(4).attempt == std::optional<std::uint64_t>(2)));
  CHECK(s.commits.at(5).digest == "00000000000000a5");  // the first record of a round stands
}

TEST_CASE("a journal answers which attempt committed a round when a record of the round names it") {
  using nlohmann::json;
  const auto path = temp_path("outcome");
  {
    auto j = Journal::open(path);
    REQUIRE(j.ok());
    // Round 1 committed here as attempt 65537, round 3 arrived by STATE_SYNC
    // from a donor that did not know its attempt; round 2 was skipped.
    REQUIRE(j->append({{"type", "committed"},
                       {"round", 1},
                       {"anchor_digest", "00000000000000a1"},
                       {"attempt", 65537},
                       {"epoch", 1}})
                .ok());
    REQUIRE(
        j->append({{"type", "committed"}, {"round", 3}, {"anchor_digest", "00000000000000a3"}, {"via", "state_sync"}})
            .ok());
    REQUIRE(j->append({{"type", "committed"}, {"round", 4}, {"anchor_digest", "not a digest"}, {"attempt", 2}}).ok());
  }
  auto j = Journal::open(path);  // the answer survives a restart
  REQUIRE(j.ok());
  auto one = round_outcome(*j, 1);
  REQUIRE(one);
  CHECK((one->round == 1 && one->attempt == 65537 && one->anchor_digest == "00000000000000a1"));
  CHECK_FALSE(round_outcome(*j, 2));  // not here
  CHECK_FALSE(round_outcome(*j, 3));  // here, but without its attempt
  CHECK_FALSE(round_outcome(*j, 4));  // a record that would make a malformed answer
  CHECK_FALSE(round_outcome(*j, 5));
  std::filesystem::remove(path);
}
