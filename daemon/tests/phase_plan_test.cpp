// The phase plan a job's WELCOME carries (phase_plan_of): the job file's
// inner phases, Streaming DiLoCo's settings and its stop, field by field.
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>

#include "daemon/phase_plan.h"
#include "job/job_spec.h"

using namespace geoloco;

namespace {

inner::protocol::PhasePlan plan_of(const std::string& extra) {
  const std::string yaml =
      "name: plan\nsites: [site-a, site-b]\ncoordinator: site-a\ntrainer: {kind: external}\n" + extra;
  auto spec = job::parse_job_yaml(YAML::Load(yaml), "plan.yaml");
  INFO((spec.ok() ? std::string() : spec.status().message()));
  REQUIRE(spec.ok());
  return daemon::phase_plan_of(*spec);
}

}  // namespace

TEST_CASE("a job of H steps with Streaming DiLoCo: H, τ, α and the stop") {
  auto p = plan_of("inner: {steps: 30}\nstreaming: {fragments: 2, overlap: 5, alpha: 0.5}\nstop: {rounds: 12}\n");
  CHECK(p.sync_every == 30);
  CHECK(p.sync_seconds == 0.0);
  CHECK(p.min_steps == 1);
  CHECK(p.overlap_steps == 5);
  CHECK(p.alpha == 0.5);
  CHECK_FALSE(p.merge_delayed);
  CHECK(p.first_round == 1);
  CHECK(p.stop_rounds == 12);
}

TEST_CASE("the delayed merge is in the plan") {
  auto p = plan_of("inner: {steps: 40}\nstreaming: {overlap: 10, merge: delayed}\nstop: {tokens: 1000000}\n");
  CHECK(p.sync_every == 40);
  CHECK(p.overlap_steps == 10);
  CHECK(p.merge_delayed);
  CHECK(p.stop_rounds == 0);  // the job stops after a number of tokens, not of rounds
}

TEST_CASE("a time-based job: seconds and min steps, no H") {
  auto p = plan_of("inner: {duration: 2500ms, min_steps: 7}\nstop: {rounds: 3}\n");
  CHECK(p.sync_every == 0);
  CHECK(p.sync_seconds == 2.5);
  CHECK(p.min_steps == 7);
  CHECK(p.overlap_steps == 0);
  CHECK(p.stop_rounds == 3);
}
