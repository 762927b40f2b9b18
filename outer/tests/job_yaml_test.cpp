#include "outer/job_yaml.h"

#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

using namespace geoloco;
using namespace geoloco::outer;
using namespace geoloco::diloco;

namespace {
Result<OuterJobConfig> parse(const std::string& text) { return parse_outer_job_yaml(YAML::Load(text), "job.yaml"); }
}  // namespace

TEST_CASE("job yaml: fills the outer, streaming, straggler and inner options") {
  auto c = parse(R"(
name: demo
inner:
  optimizer: adamw     # the trainer's key: not ours, not refused
  steps: 200
  duration: 1.5m
outer: {optimizer: sgd, lr: 1.0, momentum: 0, clip: 2.5, weighting: uniform}
streaming: {fragments: 4, overlap: 5, alpha: 0.25}
straggler: {policy: drop, decay: 0.75, deadline: 30s, min_sites: 2}
)");
  INFO(c.status().message());
  REQUIRE(c.ok());
  CHECK(c->inner.steps == 200);
  CHECK(c->inner.duration_s == 90.0);
  CHECK(c->outer.algorithm == OuterAlgorithm::sgd);
  CHECK(c->outer.learning_rate == 1.0);
  CHECK(c->outer.momentum == 0.0);
  CHECK(c->outer.clip_norm == 2.5);
  CHECK(c->weighting == Weighting::uniform);
  CHECK(c->streaming.fragments == 4);
  CHECK(c->streaming.overlap_steps == 5);
  CHECK(c->streaming.alpha == 0.25);
  CHECK(c->straggler.policy == StragglerPolicy::drop);
  CHECK(c->straggler.decay == 0.75);

  auto defaults = parse("name: x\n");
  REQUIRE(defaults.ok());
  CHECK(defaults->outer.learning_rate == 0.7);
  CHECK(defaults->outer.momentum == 0.9);
  CHECK(defaults->streaming.fragments == 1);
}

TEST_CASE("job yaml: every problem is reported with file:line:column") {
  auto c = parse(R"(name: demo
outer:
  optimizer: adam
  lr: fast
  momentun: 0.9
streaming: {fragments: -2}
straggler: {policy: carry, decay: soon}
)");
  REQUIRE_FALSE(c.ok());
  const std::string& m = c.status().message();
  INFO(m);
  CHECK_THAT(m, Catch::Contains("job.yaml:3:14: outer.optimizer: expected nesterov or sgd"));
  CHECK_THAT(m, Catch::Contains("job.yaml:4:7: outer.lr: expected a number"));
  CHECK_THAT(m, Catch::Contains("job.yaml:5:3: outer: unknown key 'momentun'"));
  CHECK_THAT(m, Catch::Contains("job.yaml:6:24: streaming.fragments: expected a non-negative integer"));
  CHECK_THAT(m, Catch::Contains("job.yaml:7:35: straggler.decay: expected a number"));
}

TEST_CASE("job yaml: range rules are reported at their section") {
  auto c = parse("inner: {steps: 10}\nstreaming:\n  overlap: 10\n");
  REQUIRE_FALSE(c.ok());
  CHECK_THAT(c.status().message(), Catch::Contains("job.yaml:3:3: streaming.overlap (10) must be smaller than"));
  auto d = parse("outer:\n  momentum: 1.5\n");
  CHECK_THAT(d.status().message(), Catch::Contains("job.yaml:2:3: outer.momentum must be in [0, 1)"));
  auto e = parse("inner: {duration: 5 minutes}\n");
  CHECK_THAT(e.status().message(), Catch::Contains("inner.duration: expected a duration"));
}

TEST_CASE("job yaml: merge: delayed, its default overlap, and what it refuses") {
  auto plain = parse("inner: {steps: 30}\nstreaming: {merge: delayed}\n");
  INFO(plain.status().message());
  REQUIRE(plain.ok());
  CHECK(plain->streaming.delayed);
  CHECK(plain->streaming.overlap_steps == 29);  // the whole next phase but its last step
  auto fragments = parse("inner: {steps: 30}\nstreaming: {merge: delayed, fragments: 3}\n");
  REQUIRE(fragments.ok());
  CHECK(fragments->streaming.overlap_steps == 10);  // H/F
  auto given = parse("inner: {steps: 30}\nstreaming: {merge: delayed, overlap: 4}\n");
  REQUIRE(given.ok());
  CHECK(given->streaming.overlap_steps == 4);
  auto replace = parse("inner: {steps: 30}\nstreaming: {merge: replace, overlap: 4}\n");
  REQUIRE(replace.ok());
  CHECK_FALSE(replace->streaming.delayed);

  auto typo = parse("inner: {steps: 30}\nstreaming: {merge: later}\n");
  REQUIRE_FALSE(typo.ok());
  CHECK_THAT(typo.status().message(), Catch::Contains("job.yaml:2:20: streaming.merge: expected"));
  auto both = parse("inner: {steps: 30}\nstreaming: {merge: delayed, alpha: 0.5}\n");
  REQUIRE_FALSE(both.ok());
  CHECK_THAT(both.status().message(),
             Catch::Contains("job.yaml:2:12: streaming.alpha weighs a merge that replaces the local values"));
}

TEST_CASE("job yaml: syntax errors and unreadable files name the file") {
  auto missing = load_outer_job_file("/nonexistent/job.yaml");
  CHECK(missing.status().code() == Err::io);
  CHECK_THAT(missing.status().message(), Catch::Contains("/nonexistent/job.yaml"));
  const auto path = std::filesystem::temp_directory_path() / "geoloco-job-yaml-test.yaml";
  {
    std::ofstream out(path);
    out << "outer:\n  lr: [0.7\n";
  }
  auto broken = load_outer_job_file(path);
  std::filesystem::remove(path);
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.status().code() == Err::invalid_argument);
  CHECK_THAT(broken.status().message(), Catch::StartsWith(path.string() + ":3:1: "));
}
