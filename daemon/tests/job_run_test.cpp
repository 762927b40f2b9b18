// A job's folder as JobRun::create finds it: a damaged checkpoint is set
// aside (and the job starts, to take the state from a peer), a checkpoint of
// another configuration of the job is refused, a usable one is loaded.
#include <yaml-cpp/yaml.h>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "common/digest.h"
#include "daemon/job_run.h"
#include "outer/checkpoint.h"

using namespace geoloco;
using namespace geoloco::daemon;
namespace fs = std::filesystem;

namespace {

const std::string kYaml =
    "name: folder\nsites: [site-a, site-b]\ncoordinator: site-a\ntrainer: {kind: external}\n"
    "inner: {steps: 10}\nstop: {rounds: 3}\n";

struct Folder {
  fs::path root;
  Folder() {
    std::string t = (fs::temp_directory_path() / "geoloco-job-run-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    root = t;
    fs::create_directories(root / "jobs" / "folder");
  }
  ~Folder() { fs::remove_all(root); }
  fs::path checkpoint() const { return root / "jobs" / "folder" / "checkpoint.safetensors"; }
};

Result<std::shared_ptr<JobRun>> create(asio::io_context& io, const Folder& folder) {
  JobEnvironment env;
  env.executor = io.get_executor();
  env.site.name = "site-b";
  env.site.data_dir = folder.root.string();
  auto spec = job::parse_job_yaml(YAML::Load(kYaml), "folder.yaml");
  REQUIRE(spec.ok());
  return JobRun::create(env, *spec, kYaml, "folder.yaml");
}

outer::OuterState state_of_round(std::uint64_t round) {
  auto s = outer::OuterState::create("folder", {{"w", {4}}}, {1, 2, 3, 4});
  REQUIRE(s.ok());
  s->round = round;
  return *s;
}

}  // namespace

TEST_CASE("a damaged checkpoint is set aside and the job starts without it") {
  asio::io_context io;
  Folder folder;
  { std::ofstream(folder.checkpoint()) << "not a safetensors file"; }
  auto job = create(io, folder);
  INFO(job.status().message());
  REQUIRE(job.ok());
  CHECK_FALSE(fs::exists(folder.checkpoint()));
  CHECK(fs::exists(folder.checkpoint().string() + ".damaged"));
  CHECK((*job)->status()["anchor_digest"].is_null());  // nothing loaded: the state comes from a peer
}

TEST_CASE("a checkpoint of another configuration of the job is refused; its own is loaded") {
  asio::io_context io;
  Folder folder;
  REQUIRE(outer::save_checkpoint(folder.checkpoint(), state_of_round(2), "0123456789abcdef").ok());
  auto other = create(io, folder);
  CHECK(other.status().code() == Err::invalid_argument);
  CHECK_THAT(other.status().message(), Catch::Contains("a checkpoint of another configuration of job 'folder'"));
  CHECK(fs::exists(folder.checkpoint()));  // kept: the user decides

  // The job's own configuration hash is the digest of its text.
  const std::string own = digest_hex(xxh3_64(std::as_bytes(std::span<const char>(kYaml))));
  REQUIRE(outer::save_checkpoint(folder.checkpoint(), state_of_round(2), own).ok());
  auto job = create(io, folder);
  REQUIRE(job.ok());
  CHECK((*job)->status()["round"] == 2);
  CHECK((*job)->status()["anchor_digest"] == digest_hex(state_of_round(2).anchor_digest()));
}
