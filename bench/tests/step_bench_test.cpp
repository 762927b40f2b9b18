// `geoloco bench step`: every thread count steps to the same anchor, the
// one-thread pass is the baseline, and bad options are refused.
#include "bench/step_bench.h"

#include <catch2/catch.hpp>
#include <sstream>

using namespace geoloco;
using namespace geoloco::bench;

TEST_CASE("bench step: the same anchor on every thread count, against the one-thread baseline") {
  for (bool raw : {false, true}) {
    CAPTURE(raw);
    StepBenchOptions o;
    o.values = (1u << 19) + 1000;  // two chunks and a short one
    o.threads = {3, 2};
    o.repeats = 1;
    o.raw = raw;
    auto rows = run_step_bench(o);
    REQUIRE(rows.ok());
    REQUIRE(rows->size() == 3);  // 1 is always measured, first
    CHECK((*rows)[0].threads == 1);
    CHECK((*rows)[1].threads == 2);
    CHECK((*rows)[2].threads == 3);
    CHECK((*rows)[0].digest_speedup == 1.0);
    CHECK((*rows)[0].step_speedup == 1.0);
    for (const auto& r : *rows) {
      CHECK(r.same_bits);
      CHECK(r.anchor_digest == (*rows)[0].anchor_digest);
      CHECK(r.anchor_digest.size() == 16);
      CHECK(r.digest_seconds > 0);
      CHECK(r.step_gbps > 0);
      CHECK(r.digest_speedup == Approx((*rows)[0].digest_seconds / r.digest_seconds));
    }
    std::ostringstream json;
    print_step_json(*rows, json);
    CHECK(json.str().find("\"same_bits\":true") != std::string::npos);
  }
  // Another seed, another anchor.
  StepBenchOptions a, b;
  a.values = b.values = 1u << 18;
  a.threads = b.threads = {1};
  a.repeats = b.repeats = 1;
  b.seed = 2;
  CHECK((*run_step_bench(a))[0].anchor_digest != (*run_step_bench(b))[0].anchor_digest);
}

TEST_CASE("bench step refuses options it cannot run") {
  StepBenchOptions o;
  o.values = 1000;
  CHECK(run_step_bench(o).status().message() == "bench step: --values must be at least 262144 (one chunk)");
  o.values = 1u << 18;
  o.threads = {0};
  CHECK(run_step_bench(o).status().message() == "bench step: thread counts are 1..256, got 0");
  o.threads = {1};
  o.repeats = 0;
  CHECK(run_step_bench(o).status().message() == "bench step: --repeats must be at least 1");
}
