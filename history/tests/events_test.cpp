// History records: every event round-trips through its JSON line; a bad line
// is refused naming the field; the file keeps records across a reopen, cuts
// only a torn tail, and the checker's reader names the file and line.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "common/line_log.h"
#include "history/history_file.h"

using namespace geoloco;
using namespace geoloco::history;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "geoloco-history-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<Event> every_event() {
  Committed c;
  c.round = 4;
  c.attempt = 1;
  c.fragment = 2;
  c.coordinator = "a";
  c.participants = {"a", "b"};
  c.late = {"c"};
  c.contributions = {{"a", 4, 12800, 12800}, {"b", 3, 6400, 3200}};
  c.digest = "0123456789abcdef";
  c.final = true;
  return {Started{"a", 3, "00000000deadbeef", "checkpoint"},
          TrainerTokens{4, 2, 12800},
          Started{"a", 3, "00000000deadbeef", "checkpoint", {{2, "00000000000000d2"}, {3, "00000000deadbeef"}}},
          c,
          StateSyncApplied{5, "0123456789abcdef", "b"},
          Dropped{2, "a", 640, "5 round(s) late, policy drop"},
          Aborted{6, 2, "peer c: no data for 20000 ms"},
          Ended{"finished", 9, "fedcba9876543210", "finished after round 9"}};
}
}  // namespace

TEST_CASE("every history event round-trips through its line", "[sanitize]") {
  std::int64_t t = 1764600000000;
  for (const auto& e : every_event()) {
    const std::string line = encode_record({t, e});
    INFO(line);
    CHECK(line.find('\n') == std::string::npos);
    auto back = parse_record(line);
    REQUIRE(back.ok());
    CHECK(back->t_ms == t);
    CHECK(back->event.index() == e.index());
    CHECK(encode_record(*back) == line);
    ++t;
  }
  auto rebuilt = std::get<Started>(parse_record(encode_record({1, every_event()[2]}))->event).rebuilt;
  CHECK(rebuilt == std::vector<RoundDigest>{{2, "00000000000000d2"}, {3, "00000000deadbeef"}});
  CHECK(std::get<Started>(parse_record(encode_record({1, every_event()[0]}))->event).rebuilt.empty());
  auto c = std::get<Committed>(parse_record(encode_record({1, every_event()[3]}))->event);
  CHECK(c.contributions[1] == Contribution{"b", 3, 6400, 3200});
  CHECK(c.final);
  CHECK(c.late == std::vector<std::string>{"c"});
}

TEST_CASE("a history line that is not a record is refused naming what is wrong", "[sanitize]") {
  auto msg = [](std::string_view line) { return parse_record(line).status().message(); };
  CHECK(msg("not json") == "not a JSON object");
  CHECK(msg("[1,2]") == "not a JSON object");
  CHECK(msg(R"({"event":"started","site":"a","round":0,"digest":"","from":"nothing"})") == "no field 't'");
  CHECK(msg(R"({"t":1,"event":"party"})") == "unknown event 'party'");
  CHECK(msg(R"({"t":1,"event":"trainer_tokens","round":-1,"fragment":0,"tokens":5})") ==
        "trainer_tokens: field 'round' must be a non-negative integer");
  CHECK(msg(R"({"t":1,"event":"dropped","round":1,"site":"a","tokens":5})") == "dropped: no field 'reason'");
  CHECK(
      msg(R"({"t":1,"event":"committed","round":1,"attempt":0,"fragment":0,"coordinator":"a",)"
          R"("participants":["a","b"],"late":[],"contributions":[{"site":"a","anchor_round":1,"tokens":1,"weight":1}],)"
          R"("digest":"x","final":false})") == "committed: one contribution per participant");
  CHECK(msg(R"({"t":1,"event":"committed","round":1,"attempt":0,"fragment":0,"coordinator":"a",)"
            R"("participants":["a"],"late":[],"contributions":[{"site":"b","anchor_round":1,"tokens":1,"weight":1}],)"
            R"("digest":"x","final":false})") == "committed: contributions in the participants' order");
  CHECK(parse_record(R"({"t":1,"event":"aborted","round":1,"attempt":0,"reason":7})").status().code() ==
        Err::malformed);
  CHECK(msg(R"({"t":1,"event":"started","site":"a","round":3,"digest":"x","from":"checkpoint","rebuilt":[2]})") ==
        "started: field 'rebuilt' must be a list of {round, digest}");
  CHECK(msg(R"({"t":1,"event":"started","site":"a","round":3,"digest":"x","from":"checkpoint",)"
            R"("rebuilt":[{"round":1,"digest":"y"}]})") ==
        "started: rebuilt must list consecutive rounds ending at round");
}

TEST_CASE("a history file keeps its records across a reopen and cuts only a torn tail", "[sanitize]") {
  TempDir d;
  const std::string path = (d.path / kHistoryFile).string();
  {
    auto h = HistoryFile::open(path);
    REQUIRE(h.ok());
    CHECK(h->records().empty());
    for (const auto& e : every_event()) REQUIRE(h->append(e).ok());
  }
  std::ofstream(path, std::ios::app) << R"({"t":1,"event":"abor)";  // killed mid-append
  auto read = read_history(path);
  REQUIRE(read.ok());
  CHECK(read->torn_tail);
  REQUIRE(read->records.size() == every_event().size());
  CHECK(std::get<Ended>(read->records.back().event).round == 9);
  CHECK(read->records.front().t_ms > 1700000000000);  // the wall clock, in ms
  {
    auto h = HistoryFile::open(path);
    REQUIRE(h.ok());
    CHECK(h->records().size() == every_event().size());
    REQUIRE(h->append(Aborted{10, 0, "x"}).ok());
  }
  auto again = read_history(path);
  REQUIRE(again.ok());
  CHECK_FALSE(again->torn_tail);
  CHECK(again->records.size() == every_event().size() + 1);

  std::ofstream(path, std::ios::app) << R"({"t":1,"event":"aborted","round":"x","attempt":0,"reason":""})"
                                     << "\n";
  auto bad = read_history(path);
  CHECK(bad.status().code() == Err::malformed);
  CHECK(bad.status().message() == path + ":10: aborted: field 'round' must be a non-negative integer");
}

TEST_CASE("the journal's commits are read up to its first damaged line", "[sanitize]") {
  TempDir d;
  const std::string path = (d.path / "journal").string();
  {
    std::ofstream out(path);
    out << hashed_line(R"({"type":"plan","round":1,"attempt":0})") << "\n"
        << hashed_line(R"({"type":"committed","round":1,"anchor_digest":"aaaa","tokens":5,"final":false})") << "\n"
        << hashed_line(R"({"type":"committed","round":2,"anchor_digest":"bbbb","tokens":9,"final":true})") << "\n"
        << "0000000000000000 {\"type\":\"committed\",\"round\":3,\"anchor_digest\":\"cccc\"}\n";
  }
  auto commits = read_journal_commits(path);
  REQUIRE(commits.ok());
  REQUIRE(commits->size() == 2);
  CHECK((*commits)[0].round == 1);
  CHECK((*commits)[0].digest == "aaaa");
  CHECK_FALSE((*commits)[0].final);
  CHECK((*commits)[1].final);
  CHECK(read_journal_commits((d.path / "none").string()).status().code() == Err::io);
}
