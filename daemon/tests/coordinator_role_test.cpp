// The coordinator role resumed from its journal answers a COMMIT of any
// committed round with that round's COMMITTED, naming the attempt that
// committed it: a site that lost track of a round learns whether its work
// was counted. Its first words to each site re-announce the last COMMITTED.
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
  {
    auto journal = Journal::open(path);
    REQUIRE(journal.ok());
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
      io.get_executor(), *spec, 3000ms, path, [&](const std::string& site, const ControlMessage& m) { sent.push_back({site, m}); },
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
