// The training loop's clock, in process on synthetic data:
//   * time-based phases: the rule, a slow step taking fewer steps per
//     round, and two workers whose clocks disagree still taking the same
//     steps (rank 0 decides);
//   * GEOLOCO_TRAIN_STEP_DELAY_MS: its parsing, and its sleep inside the
//     phase's time;
//   * the compute share: time in steps over the loop's time without
//     evaluations, on a fixed clock.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/digest.h"
#include "inner/cpu/blas.h"
#include "inner/tests/fork_ranks.h"
#include "inner/tests/synthetic_data.h"
#include "inner/tests/sync_helpers.h"
#include "inner/tests/temp_files.h"
#include "inner/train/fault_injection.h"
#include "inner/train/run_training.h"

using namespace geoloco;
using namespace geoloco::inner;
using namespace geoloco::inner::testing;

namespace {

TrainOptions mlp_options() {
  TrainOptions o;
  o.model = "mlp";
  o.mlp = MlpOptions{16, {32, 16}, 10};
  o.batch = 32;
  o.schedule = ScheduleOptions{1e-2, 30, 100, 0.1};
  o.seed = 7;
  o.eval_batch = 64;
  return o;
}

// A trainer of `steps` steps on one worker (the collective outlives it).
struct OneWorker {
  explicit OneWorker(std::uint64_t steps) {
    options.steps = steps;
    auto t = Trainer::create(options, one, synthetic_image_dataset());
    REQUIRE(t.ok());
    trainer = std::move(*t);
  }
  TrainOptions options = mlp_options();
  SingleCollective one;
  std::unique_ptr<Trainer> trainer;
};

}  // namespace

TEST_CASE("time-based phases: at least S seconds and min_steps; rules refused", "[train][duration]") {
  TrainHooks h;
  h.sync_seconds = 0.3;
  h.min_steps = 3;
  CHECK_FALSE(phase_over(h, 2, 5.0));  // time is up, steps are not
  CHECK_FALSE(phase_over(h, 50, 0.29));
  CHECK(phase_over(h, 3, 0.3));
  TrainHooks fixed;
  fixed.sync_every = 4;
  CHECK_FALSE(phase_over(fixed, 3, 100.0));
  CHECK(phase_over(fixed, 4, 0.0));
  CHECK_FALSE(phase_over(TrainHooks{}, 1000, 1000.0));

  TrainHooks both = h;
  both.sync_every = 4;
  CHECK_THAT(validate_hooks(both).message(), Catch::Contains("exclude each other"));
  TrainHooks zero = h;
  zero.min_steps = 0;
  CHECK(validate_hooks(zero).code() == Err::invalid_argument);
}

TEST_CASE("time-based phases on a clock: a slow step means fewer steps per round", "[train][duration]") {
  cpu::set_blas_threads(1);
  auto phases = [&](double seconds_per_step, std::uint64_t min_steps) {
    OneWorker w(24);
    long ticks = 0;  // the clock moves only when a step ends
    TrainHooks hooks;
    hooks.sync_seconds = 0.25;
    hooks.min_steps = min_steps;
    hooks.clock = [&] { return static_cast<double>(ticks) * seconds_per_step; };
    hooks.on_step = [&](const StepStats&) { ++ticks; };
    std::vector<std::uint64_t> steps;
    hooks.on_sync = [&](SyncPoint& p) {
      if (p.work_units != p.phase_steps * w.options.batch)
        return GEOLOCO_ERROR(Err::internal, "tokens do not count the work");
      steps.push_back(p.phase_steps);
      return Status();
    };
    auto r = run_training(*w.trainer, hooks);
    REQUIRE(r.ok());
    return steps;
  };
  CHECK(phases(0.1, 1) == std::vector<std::uint64_t>{3, 3, 3, 3, 3, 3, 3, 3});  // 0.3 s >= 0.25 s after 3 steps
  CHECK(phases(0.02, 1) == std::vector<std::uint64_t>{13});                     // the rest (11) never reaches 0.25 s
  CHECK(phases(0.1, 5) == std::vector<std::uint64_t>{5, 5, 5, 5});              // min_steps wins
}

TEST_CASE("time-based phases with 2 workers: rank 0's clock decides for both", "[train][duration]") {
  auto data = testing::synthetic_image_dataset();
  TrainOptions o = mlp_options();
  o.batch = 8;
  o.steps = 20;
  const std::string prefix = "/tmp/geoloco_train_sync_" + std::to_string(::getpid()) + "_";
  auto codes = testing::fork_ranks(2, [&](int rank) {
    auto c = rank_collective();
    if (!c.ok()) return 2;
    auto t = Trainer::create(o, **c, data);
    if (!t.ok()) return 3;
    long ticks = 0;
    TrainHooks hooks;
    hooks.sync_seconds = 1.0;
    // Rank 0's phases end every 4 steps; rank 1's clock stands still (it would never end one).
    hooks.clock = [&] { return rank == 0 ? static_cast<double>(ticks) * 0.25 : 0.0; };
    hooks.on_step = [&](const StepStats&) { ++ticks; };
    std::uint64_t syncs = 0;
    hooks.on_sync = [&](SyncPoint& p) {
      ++syncs;
      return p.phase_steps == 4 && p.work_units == 4 * 2 * o.batch
                 ? Status()
                 : GEOLOCO_ERROR(Err::internal, "phase of ", p.phase_steps);
    };
    auto r = run_training(**t, hooks);
    if (!r.ok()) return 4;
    if ((*t)->steps_done() != 20) return 5;
    if (rank == 0 && syncs != 5) return 6;
    std::ofstream(prefix + std::to_string(rank)) << digest_hex(digest_f32((*t)->params()));
    return 0;
  });
  REQUIRE(codes == std::vector<int>{0, 0});
  CHECK(read_lines(prefix + "0") == read_lines(prefix + "1"));
  std::filesystem::remove(prefix + "0");
  std::filesystem::remove(prefix + "1");
}

TEST_CASE("GEOLOCO_TRAIN_STEP_DELAY_MS: unset is 0, a whole number of ms, anything else refused", "[train][fault]") {
  CHECK(*parse_step_delay_ms(nullptr) == 0);
  CHECK(*parse_step_delay_ms("0") == 0);
  CHECK(*parse_step_delay_ms("250") == 250);
  CHECK(*parse_step_delay_ms("3600000") == 3'600'000);
  for (const char* bad : {"", "12ms", "-5", "1e3", " 7", "2.5", "3600001", "99999999999999999999"}) {
    INFO("value '" << bad << "'");
    auto r = parse_step_delay_ms(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == std::string("GEOLOCO_TRAIN_STEP_DELAY_MS='") + bad +
                                      "' is not a whole number of milliseconds between 0 and 3600000 (e.g. "
                                      "GEOLOCO_TRAIN_STEP_DELAY_MS=200)");
  }
}

TEST_CASE("run_training sleeps the step delay inside the phase's time", "[train][fault]") {
  OneWorker w(4);
  TrainHooks hooks;
  hooks.step_delay_ms = 30;
  hooks.sync_every = 2;
  std::vector<double> seconds;
  hooks.on_sync = [&](SyncPoint& p) {
    seconds.push_back(p.phase_seconds);
    return Status();
  };
  auto r = run_training(*w.trainer, hooks);
  REQUIRE(r.ok());
  REQUIRE(seconds.size() == 2);
  CHECK(seconds[0] >= 2 * 0.030);
  CHECK(seconds[1] >= 2 * 0.030);
  CHECK(r->seconds >= 4 * 0.030);
}

TEST_CASE("the compute share: time in steps over the loop's time without evaluations", "[train][utilization]") {
  OneWorker w(4);
  double now = 100.0;  // a step takes 1 s, a sync holds training 0.5 s, an evaluation 0.25 s
  TrainHooks hooks;
  hooks.clock = [&] { return now; };
  hooks.on_step = [&](const StepStats&) { now += 1.0; };
  hooks.on_eval = [&](std::uint64_t, const EvalResult&) { now += 0.25; };
  hooks.sync_every = 2;
  std::vector<std::pair<double, double>> at_sync;  // compute, loop
  hooks.on_sync = [&](SyncPoint& p) {
    at_sync.emplace_back(p.compute_seconds, p.loop_seconds);
    now += 0.5;
    return Status();
  };
  hooks.after_sync = [&](const SyncPoint&) {  // the anchor's evaluation
    now += 0.125;
    return Status();
  };
  auto r = run_training(*w.trainer, hooks);
  REQUIRE(r.ok());
  // A sync sees the counters up to its own call: its hold counts from the next one on.
  CHECK(at_sync == std::vector<std::pair<double, double>>{{2.0, 2.0}, {4.0, 4.5}});
  CHECK(r->compute_seconds == 4.0);
  CHECK(r->eval_seconds == 0.5);  // two anchors' (after_sync) and the final evaluation
  CHECK(r->loop_seconds == 5.0);
  CHECK(r->compute_share == 4.0 / 5.0);  // 4 s of steps, 1 s held by the two syncs
}
