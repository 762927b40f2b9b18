// The coordinator role resumed from its journal answers a COMMIT of any
// committed round with that round's COMMITTED, naming the attempt that
// committed it: a site that lost track of a round learns whether its work
// was counted. Its first words to each site re-announce the last COMMITTED.
// A successor starts from its voters' recovery: journaled, completed or
// aborted in its own epoch.
#include <yaml-cpp/yaml.h>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>

#include "daemon/coordinator_role.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const std::string kYaml =
    "name: role\nsites: [a, b]\ncoordinator: a\ntrainer: {kind: external}\ninner: {steps: 10}\nstop: {rounds: 9}\n";
const std::string kDigest1 = "00000000000000a1", kDigest2 = "00000000000000a2";

struct Sent {
  std::string site;
  ControlMessage message;
};

}  // namespace

TEST_CASE("a resumed coordinator answers a COMMIT of an earlier committed round with its attempt") {
  std::string dir = (fs::temp_directory_path() / "geoloco-role-XXXXXX").string();
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  const std::string path = dir + "/journal.jsonl";
  auto journal = Journal::open(path);
  REQUIRE(journal.ok());
  {
    for (const auto& r : std::vector<nlohmann::json>{
             {{"type", "plan"}, {"round", 1}, {"attempt", 0}},
             {{"type", "committed"}, {"round", 1}, {"anchor_digest", kDigest1}, {"tokens", 640}, {"final", false}},
             {{"type", "plan"}, {"round", 2}, {"attempt", 0}},
             {{"type", "abort"}, {"round", 2}, {"reason", "b failed"}},
             {{"type", "plan"}, {"round", 2}, {"attempt", 1}},
             {{"type", "committed"}, {"round", 2}, {"anchor_digest", kDigest2}, {"tokens", 1280}, {"final", false}}})
      REQUIRE(journal->append(r).ok());
  }
  asio::io_context io;
  auto spec = job::parse_job_yaml(YAML::Load(kYaml), "role.yaml");
  REQUIRE(spec.ok());
  std::vector<Sent> sent;
  auto role = CoordinatorRole::open(
      io.get_executor(), *spec, 3000ms, *journal, CoordinatorRole::Start{"a", 0, std::nullopt},
      [&](const std::string& site, const ControlMessage& m) {
        sent.push_back({site, m});
      },
      [](const std::string&) {});
  REQUIRE(role.ok());
  auto committed = [&](std::size_t i) {
    REQUIRE(i < sent.size());
    REQUIRE(std::holds_alternative<CommittedMessage>(sent[i].message));
    return std::get<CommittedMessage>(sent[i].message);
  };
  (*role)->on_message("b", CommitMessage{1, kDigest1, 0});
  // Greeted first (the last COMMITTED again, and the round in flight aborted), then the answer.
  REQUIRE(sent.size() == 3);
  CHECK((committed(0).round == 2 && committed(0).attempt == std::optional<std::uint64_t>(1)));
  CHECK(std::holds_alternative<AbortMessage>(sent[1].message));
  CHECK((committed(2).round == 1 && committed(2).anchor_digest == kDigest1 &&
         committed(2).attempt == std::optional<std::uint64_t>(0) && !committed(2).final));
  (*role)->on_message("b", CommitMessage{2, kDigest2, 0});
  REQUIRE(sent.size() == 4);
  CHECK((committed(3).round == 2 && committed(3).attempt == std::optional<std::uint64_t>(1)));
  CHECK(sent[3].site == "b");
  fs::remove_all(dir);
}

TEST_CASE(
    "a successor journals its voters' recovery, completes the pending round in its own epoch, then plans past it") {
  std::string dir = (fs::temp_directory_path() / "geoloco-role-XXXXXX").string();
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  auto journal = Journal::open(dir + "/journal");
  REQUIRE(journal.ok());
  // This site (b) applied round 1 only; its voters knew round 2, and one held
  // the COMMIT of round 3's attempt 4.
  REQUIRE(journal
              ->append({{"type", "committed"},
                        {"round", 1},
                        {"anchor_digest", kDigest1},
                        {"tokens", 640},
                        {"attempt", 0},
                        {"epoch", 0}})
              .ok());
  Recovery r;
  r.round = 2;
  r.digest = kDigest2;
  r.tokens = 1280;
  r.attempt = 1;
  r.complete = PendingCommit{3, 4, "00000000000000a3", 600};
  asio::io_context io;
  auto spec = job::parse_job_yaml(YAML::Load(kYaml), "role.yaml");
  REQUIRE(spec.ok());
  std::vector<Sent> sent;
  auto role = CoordinatorRole::open(
      io.get_executor(), *spec, 3000ms, *journal, CoordinatorRole::Start{"b", 2, r},
      [&](const std::string& site, const ControlMessage& m) {
        sent.push_back({site, m});
      },
      [](const std::string&) {});
  REQUIRE(role.ok());
  CHECK((*role)->committed_round() == 3);
  CHECK((*role)->committed_digest() == "00000000000000a3");
  const auto& records = journal->records();
  REQUIRE(records.size() == 4);
  CHECK(records[3] == office_started_record(2));  // after the recovery: the office may be acted on
  CHECK(records[1] == nlohmann::json{{"type", "committed"},
                                     {"round", 2},
                                     {"anchor_digest", kDigest2},
                                     {"tokens", 1280},
                                     {"final", false},
                                     {"epoch", 2},
                                     {"via", "recovery"},
                                     {"attempt", 1}});
  CHECK(records[2] == nlohmann::json{{"type", "committed"},
                                     {"round", 3},
                                     {"anchor_digest", "00000000000000a3"},
                                     {"tokens", 1880},
                                     {"final", false},
                                     {"attempt", 4},
                                     {"epoch", 2},
                                     {"via", "completed"}});
  (*role)->on_message("a", HeartbeatMessage{});
  // The completed round is announced in the new epoch; nothing is aborted.
  REQUIRE(sent.size() == 1);
  const auto& c = std::get<CommittedMessage>(sent[0].message);
  CHECK((c.round == 3 && c.attempt == std::optional<std::uint64_t>(4) && c.epoch == 2 && c.tokens == 1880));
  fs::remove_all(dir);
}

TEST_CASE("a successor without a round to complete aborts the attempt in flight in its own epoch") {
  std::string dir = (fs::temp_directory_path() / "geoloco-role-XXXXXX").string();
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  auto journal = Journal::open(dir + "/journal");
  REQUIRE(journal.ok());
  Recovery r;
  r.round = 2;
  r.digest = kDigest2;
  r.tokens = 1280;
  r.abandon = 7;
  asio::io_context io;
  auto spec = job::parse_job_yaml(YAML::Load(kYaml), "role.yaml");
  REQUIRE(spec.ok());
  std::vector<Sent> sent;
  auto role = CoordinatorRole::open(
      io.get_executor(), *spec, 3000ms, *journal, CoordinatorRole::Start{"b", 1, r},
      [&](const std::string& site, const ControlMessage& m) {
        sent.push_back({site, m});
      },
      [](const std::string&) {});
  REQUIRE(role.ok());
  (*role)->on_message("a", HeartbeatMessage{});
  REQUIRE(sent.size() == 2);
  const auto& c = std::get<CommittedMessage>(sent[0].message);
  CHECK((c.round == 2 && c.epoch == 1 && !c.attempt));  // a recovered round whose attempt no voter knew
  const auto& a = std::get<AbortMessage>(sent[1].message);
  CHECK((a.round == 3 && a.attempt == 7 && a.epoch == 1));
  CHECK(a.reason == "coordinator failover: b took office in epoch 1; send READY again");
  fs::remove_all(dir);
}
