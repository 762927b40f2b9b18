// Every file shipped under configs/ is valid: the demo site files load, and
// every job file passes the complete job validation (the demo jobs against
// the demo federation).
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "job/job_spec.h"
#include "daemon/site_config.h"

using namespace geoloco;
using namespace geoloco::daemon;

namespace {
const std::filesystem::path kConfigs = "../configs";  // ctest runs in daemon/
}

TEST_CASE("the shipped site files load and describe one loopback federation") {
  std::set<std::string> names;
  std::set<std::uint16_t> ports;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs / "sites")) {
    auto site = load_site_file(entry.path().string());
    INFO(entry.path().string() << ": " << site.status().message());
    REQUIRE(site.ok());
    names.insert(site->name);
    ports.insert(site->listen.port);
    ports.insert(site->metrics.port);
    CHECK(site->peers.size() == 2);
    ++files;
  }
  CHECK(files == 3);
  CHECK(names == std::set<std::string>{"site-a", "site-b", "site-c"});
  CHECK(ports.size() == 6);  // no two sites share a port
}

TEST_CASE("every shipped job file passes the complete validation") {
  const std::set<std::string> federation{"site-a", "site-b", "site-c"};
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs / "jobs")) {
    if (!entry.is_regular_file()) continue;  // jobs/tests/ holds deliberately broken files
    const bool demo = entry.path().filename().string().rfind("simulate-", 0) != 0;
    auto job = job::load_job_file(entry.path().string(), demo ? federation : std::set<std::string>{});
    INFO(entry.path().string() << ": " << job.status().message());
    CHECK(job.ok());
    ++files;
  }
  CHECK(files >= 6);
}
