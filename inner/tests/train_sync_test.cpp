// geoloco-train's side of the rounds, in process, on synthetic data so every
// value can be compared exactly.
//   * resume position: a trainer resumed at step 2H takes the step an
//     uninterrupted trainer takes at 2H+1 (same lr, same batch, same bits);
//   * AdamW restored from saved moments continues with the same bits;
//   * time-based rounds: the phase rule, and two workers whose clocks
//     disagree still take the same steps (rank 0 decides);
//   * GEOLOCO_TRAIN_STEP_DELAY_MS parsing, and the delay inside a phase;
//   * the inner state file: round trip, damage refused, which state is used;
//   * eval log lines.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/digest.h"
#include "inner/collective/launch.h"
#include "inner/collective/shm_collective.h"
#include "inner/cpu/blas.h"
#include "inner/tests/fork_ranks.h"
#include "inner/tests/synthetic_data.h"
#include "inner/train/eval_log.h"
#include "inner/train/fault_injection.h"
#include "inner/train/inner_state.h"
#include "inner/train/run_training.h"

using namespace geoloco;
using namespace geoloco::inner;

namespace {

constexpr std::uint64_t kH = 10;

TrainOptions mlp_options() {
  TrainOptions o;
  o.model = "mlp";
  o.mlp = MlpOptions{16, {32, 16}, 10};
  o.batch = 32;  // 2H steps read 640 items of 512: the resume crosses an epoch
  o.steps = 100;
  // The warmup (30 steps) outlasts two rounds: a restart must not redo it.
  o.schedule = ScheduleOptions{1e-2, 30, 100, 0.1};
  o.seed = 7;
  o.eval_batch = 64;
  return o;
}

TrainOptions gpt_options() {
  TrainOptions o;
  o.model = "gpt";
  o.gpt = GptOptions{256, 8, 16, 1, 2};
  o.batch = 4;
  o.steps = 100;
  o.schedule = ScheduleOptions{3e-3, 30, 100, 0.1};
  o.seed = 5;
  return o;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

struct TempDir {
  std::string path;
  TempDir() {
    static int n = 0;
    path = (std::filesystem::temp_directory_path() /
            ("geoloco-train-sync-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
               .string();
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("a trainer resumed at step 2H takes the step an uninterrupted one takes at 2H+1", "[train][resume]") {
  cpu::set_blas_threads(1);
  for (const TrainOptions& o : {mlp_options(), gpt_options()}) {
    INFO("model " << o.model);
    auto data = o.model == "mlp" ? testing::synthetic_image_dataset() : testing::synthetic_text_dataset(o.gpt.context);
    SingleCollective one;
    auto uninterrupted = Trainer::create(o, one, data);
    REQUIRE(uninterrupted.ok());
    for (std::uint64_t i = 0; i < 2 * kH; ++i) REQUIRE((*uninterrupted)->step().ok());

    // Both later trainers start from the uninterrupted one's parameters; only the resumed one knows where it is.
    auto resumed = Trainer::create(o, one, data);
    auto naive = Trainer::create(o, one, data);
    REQUIRE(resumed.ok());
    REQUIRE(naive.ok());
    REQUIRE((*resumed)->resume_at(2 * kH).ok());
    CHECK((*resumed)->steps_done() == 2 * kH);
    CHECK((*resumed)->optimizer().steps() == 0);  // the moments are not the resume's business
    for (auto* t : {resumed->get(), naive->get()})
      std::copy((*uninterrupted)->params().begin(), (*uninterrupted)->params().end(), t->params().begin());

    auto a = (*uninterrupted)->step();
    auto b = (*resumed)->step();
    auto c = (*naive)->step();
    REQUIRE((a.ok() && b.ok() && c.ok()));
    CHECK(b->step == 2 * kH);
    CHECK(b->step == a->step);
    CHECK(b->lr == a->lr);  // exactly: the schedule is a function of the step
    CHECK(a->lr == learning_rate(o.schedule, 2 * kH));
    CHECK(b->loss == a->loss);  // same parameters, same batch
    CHECK(same_bits((*resumed)->grads(), (*uninterrupted)->grads()));
    // The control: a trainer that does not resume redoes the warmup and reads the first batch again.
    CHECK(c->lr != a->lr);
    CHECK(c->lr == learning_rate(o.schedule, 0));
    CHECK_FALSE(same_bits((*naive)->grads(), (*uninterrupted)->grads()));
    // And one more step still agrees (the streams stay in step).
    REQUIRE((*uninterrupted)->step().ok());
    REQUIRE((*resumed)->step().ok());
    auto a2 = (*uninterrupted)->step();
    auto b2 = (*resumed)->step();
    REQUIRE((a2.ok() && b2.ok()));
    CHECK(b2->lr == a2->lr);

    CHECK((*resumed)->resume_at(5).message().find("cannot resume at step 5") != std::string::npos);
  }
}

TEST_CASE("AdamW restored from a saved state continues with the same bits", "[train][state]") {
  const std::vector<float> g1{0.5f, -0.25f, 1.0f}, g2{-0.125f, 0.75f, 0.25f};
  cpu::AdamWOptions opts;
  cpu::AdamW straight(3, opts, {{0, 2}});
  std::vector<float> p{1.0f, 2.0f, 3.0f};
  for (int i = 0; i < 5; ++i) REQUIRE(straight.step(p, g1, 1e-2).ok());
  std::vector<float> q = p;
  cpu::AdamW restored(3, opts, {{0, 2}});
  REQUIRE(restored.restore(straight.first_moment(), straight.second_moment(), straight.steps()).ok());
  CHECK(restored.steps() == 5);
  REQUIRE(straight.step(p, g2, 1e-2).ok());
  REQUIRE(restored.step(q, g2, 1e-2).ok());
  CHECK(same_bits(p, q));
  // Zero moments (a trainer without a state) take another step.
  cpu::AdamW fresh(3, opts, {{0, 2}});
  std::vector<float> r = q;
  REQUIRE(straight.step(q, g1, 1e-2).ok());
  REQUIRE(fresh.step(r, g1, 1e-2).ok());
  CHECK_FALSE(same_bits(q, r));
  CHECK(restored.restore(std::vector<float>(2), std::vector<float>(3), 1).code() == Err::invalid_argument);
}

TEST_CASE("the inner state file: round trip, damage and another round refused", "[train][state]") {
  TempDir dir;
  auto none = load_inner_state(dir.path);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  CHECK(choose_inner_state(none, dir.path, 4, 11, 3).reason ==
        "no saved inner state in " + dir.path + ": starting round 4 with zero AdamW moments");

  const std::vector<float> m{0.5f, -1.25f, 3e-8f}, v{1e-4f, 2.0f, 0.0f};
  REQUIRE(save_inner_state(dir.path, 4, 30, 29, 11, m, v).ok());
  CHECK_FALSE(std::filesystem::exists(inner_state_path(dir.path) + ".tmp"));
  auto loaded = load_inner_state(dir.path);
  REQUIRE(loaded.ok());
  REQUIRE(loaded->has_value());
  const InnerState& s = **loaded;
  CHECK(s.round == 4);
  CHECK(s.steps_done == 30);
  CHECK(s.adamw_steps == 29);
  CHECK(s.layout_digest == 11);
  CHECK(s.m == m);
  CHECK(s.v == v);
  CHECK(std::filesystem::file_size(inner_state_path(dir.path)) == 48 + 3 * 8 + 8);

  const StateChoice use = choose_inner_state(loaded, dir.path, 4, 11, 3);
  CHECK(use.use);
  CHECK(use.reason == "loaded " + inner_state_path(dir.path) + ": round 4, step 30, AdamW step 29");
  const StateChoice later = choose_inner_state(loaded, dir.path, 5, 11, 3);
  CHECK_FALSE(later.use);
  CHECK(later.reason ==
        inner_state_path(dir.path) + " belongs to round 4, this trainer starts round 5: zero AdamW moments");
  CHECK_FALSE(choose_inner_state(loaded, dir.path, 4, 12, 3).use);  // another layout
  CHECK_FALSE(choose_inner_state(loaded, dir.path, 4, 11, 4).use);  // another size

  // A flipped bit in a moment: refused by the digest, and the trainer goes on without it.
  {
    std::fstream f(inner_state_path(dir.path), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(48 + 5);
    f.put('\x7f');
  }
  auto damaged = load_inner_state(dir.path);
  REQUIRE_FALSE(damaged.ok());
  CHECK(damaged.status().code() == Err::malformed);
  CHECK_THAT(damaged.status().message(), Catch::Contains("digest mismatch"));
  const StateChoice unreadable = choose_inner_state(damaged, dir.path, 4, 11, 3);
  CHECK_FALSE(unreadable.use);
  CHECK_THAT(unreadable.reason, Catch::Contains("is unreadable") && Catch::Contains("zero AdamW moments"));

  // Cut short: refused before allocating what the header claims.
  std::filesystem::resize_file(inner_state_path(dir.path), 48 + 10);
  CHECK(load_inner_state(dir.path).status().code() == Err::too_large);
  std::filesystem::resize_file(inner_state_path(dir.path), 20);
  CHECK(load_inner_state(dir.path).status().code() == Err::truncated);
}

TEST_CASE("eval log lines: fixed keys, null accuracy for gpt, null for a non-finite loss", "[train][eval-log]") {
  EvalLogEntry e;
  e.round = 3;
  e.eval = EvalResult{0.5, 3, 4};
  e.has_accuracy = true;
  e.items = 4;
  e.unix_time = 1764500000.125;
  CHECK(eval_log_line(e) ==
        "{\"round\": 3, \"eval_loss\": 0.5, \"accuracy\": 0.75, \"items\": 4, \"unix_time\": 1764500000.125}\n");
  e.has_accuracy = false;
  e.eval.loss = std::nan("");
  CHECK(eval_log_line(e) ==
        "{\"round\": 3, \"eval_loss\": null, \"accuracy\": null, \"items\": 4, \"unix_time\": 1764500000.125}\n");
  CHECK(EvalLog::open("/nonexistent-dir/eval.jsonl").status().code() == Err::io);
}

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
  auto data = testing::synthetic_image_dataset();
  auto phases = [&](double seconds_per_step, std::uint64_t min_steps) {
    TrainOptions o = mlp_options();
    o.steps = 24;
    SingleCollective one;
    auto t = Trainer::create(o, one, data);
    REQUIRE(t.ok());
    long ticks = 0;  // the clock moves only when a step ends
    TrainHooks hooks;
    hooks.sync_seconds = 0.25;
    hooks.min_steps = min_steps;
    hooks.clock = [&] { return static_cast<double>(ticks) * seconds_per_step; };
    hooks.on_step = [&](const StepStats&) { ++ticks; };
    std::vector<std::uint64_t> steps;
    hooks.on_sync = [&](SyncPoint& p) {
      if (p.work_units != p.phase_steps * o.batch) return GEOLOCO_ERROR(Err::internal, "tokens do not count the work");
      steps.push_back(p.phase_steps);
      return Status();
    };
    auto r = run_training(**t, hooks);
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
    cpu::set_blas_threads(1);
    auto launch = launch_info_from_env();
    if (!launch.ok()) return 1;
    auto c = make_cpu_collective(*launch);
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
  auto data = testing::synthetic_image_dataset();
  TrainOptions o = mlp_options();
  o.steps = 4;
  SingleCollective one;
  auto t = Trainer::create(o, one, data);
  REQUIRE(t.ok());
  TrainHooks hooks;
  hooks.step_delay_ms = 30;
  hooks.sync_every = 2;
  std::vector<double> seconds;
  hooks.on_sync = [&](SyncPoint& p) {
    seconds.push_back(p.phase_seconds);
    return Status();
  };
  auto r = run_training(**t, hooks);
  REQUIRE(r.ok());
  REQUIRE(seconds.size() == 2);
  CHECK(seconds[0] >= 2 * 0.030);
  CHECK(seconds[1] >= 2 * 0.030);
  CHECK(r->seconds >= 4 * 0.030);
}
