// geoloco-train's side of the rounds, in process: a trainer against the
// protocol's fake daemon (inner/protocol/tests/test_daemon.h) on synthetic
// data, so every value can be compared exactly.
//   * resume position: a trainer resumed at step 2H takes the step an
//     uninterrupted trainer takes at 2H+1 (same lr, same batch, same bits);
//   * restart: with --state-dir, the anchors after a restart between rounds
//     equal those of an uninterrupted run bit for bit; without, they do not;
//   * the inner state file: round trip, damage refused, which state is used;
//   * the eval log: a line per anchor, with the losses the trainer computes;
//   * time-based rounds: the options' rule.
// The loop's clock (time-based phases, the step delay, the compute share)
// is train_clock_test.cpp's.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/digest.h"
#include "inner/collective/launch.h"
#include "inner/collective/shm_collective.h"
#include "inner/cpu/blas.h"
#include "inner/protocol/tests/test_daemon.h"
#include "inner/tests/fork_ranks.h"
#include "inner/tests/synthetic_data.h"
#include "inner/tests/sync_helpers.h"
#include "inner/tests/temp_files.h"
#include "inner/train/eval_log.h"
#include "inner/train/fault_injection.h"
#include "inner/train/inner_state.h"
#include "inner/train/synced_training.h"

using namespace geoloco;
using namespace geoloco::inner;
using namespace geoloco::inner::testing;
namespace pt = geoloco::inner::protocol::testing;

namespace {

constexpr std::uint64_t kH = 10;
const std::string kJob = "train-sync-test";

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

pt::FakeDaemonConfig daemon_config(std::uint64_t stop_after_round) {
  pt::FakeDaemonConfig c;
  c.eta = 0.5f;
  c.stop_after_round = stop_after_round;
  c.deadline_ms = 60'000;
  return c;
}

SyncedOptions synced_options(const std::string& path) {
  SyncedOptions s;
  s.socket_path = path;
  s.job = kJob;
  s.sync_every = kH;
  s.first_round = 0;  // the fake daemon counts rounds from 0
  s.timeout_ms = 20'000;
  return s;
}

struct Finished {
  TrainReport report;
  std::uint64_t welcome_round = 0, resume_step = 0;
  bool state_loaded = false;
  std::string out;
};

// One trainer process's life, in process: start (HELLO ... WELCOME), run, leave.
Finished train_once(const TrainOptions& o, const SyncedOptions& s, std::shared_ptr<const Dataset> data) {
  SingleCollective one;
  std::ostringstream out;
  auto run = SyncedTraining::start(o, s, one, std::move(data), out);
  INFO(out.str());
  REQUIRE(run.ok());
  auto report = (*run)->run({});
  INFO(out.str());
  REQUIRE(report.ok());
  return {*report, (*run)->welcome_round(), (*run)->resume_step(), (*run)->state_loaded(), out.str()};
}

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

TEST_CASE("steps before a round: (round - first round) x H", "[train][resume]") {
  CHECK(steps_before_round(3, 1, kH) == 2 * kH);  // geolocod: welcomed at round 3 = 2H steps behind
  CHECK(steps_before_round(1, 1, kH) == 0);
  CHECK(steps_before_round(0, 1, kH) == 0);  // a host counting from 0 with the default first round
  CHECK(steps_before_round(2, 0, kH) == 2 * kH);
  CHECK(steps_before_round(7, 1, 0) == 0);  // time-based rounds: unknown without a saved state
}

TEST_CASE("with --state-dir a restart between rounds changes no bit of the anchors; without, it does",
          "[train][state]") {
  cpu::set_blas_threads(1);
  auto data = testing::synthetic_image_dataset();
  const TrainOptions o = mlp_options();

  // Rounds 0..3 without interruption.
  auto path_a = pt::temp_socket_path("train-a");
  pt::FakeDaemon uninterrupted(open_server(path_a, kJob), daemon_config(3));
  TempDir state_a("geoloco-train-sync", /*create=*/false);
  SyncedOptions sa = synced_options(path_a);
  sa.state_dir = state_a.path;
  const Finished a = train_once(o, sa, data);
  CHECK(a.report.steps == 4 * kH);
  REQUIRE(uninterrupted.syncs().size() == 4);
  // Every sync's line ends with the compute since the previous sync, in the
  // form bench/utilization.py reads; the run's share lies in (0, 1].
  const std::regex sync_line(R"(round \d+ synced: \d+ steps in [0-9.]+ s, .*; computed ([0-9.]+) of the ([0-9.]+) s )"
                             R"(since the last sync \(([0-9.]+)%\))");
  std::istringstream lines(a.out);
  int synced = 0;
  for (std::string l; std::getline(lines, l);) {
    std::smatch m;
    if (!std::regex_search(l, m, sync_line)) continue;
    ++synced;
    // Milliseconds are printed; these mlp steps take microseconds.
    const double computed = std::stod(m[1]), wall = std::stod(m[2]), percent = std::stod(m[3]);
    INFO(l);
    CHECK(computed <= wall + 0.001);
    CHECK(percent > 0);
    CHECK(percent <= 100);
  }
  CHECK(synced == 4);
  CHECK(a.report.compute_seconds > 0);
  CHECK(a.report.compute_share > 0);
  CHECK(a.report.compute_share <= 1);

  // Rounds 0..1, the trainer ends (its --steps run out: what a kill right after the save leaves), a new one does 2..3.
  auto path_b = pt::temp_socket_path("train-b");
  pt::FakeDaemon restarted(open_server(path_b, kJob), daemon_config(3));
  TempDir state_b("geoloco-train-sync", /*create=*/false);
  SyncedOptions sb = synced_options(path_b);
  sb.state_dir = state_b.path;
  TrainOptions first = o;
  first.steps = 2 * kH;
  const Finished b1 = train_once(first, sb, data);
  CHECK(b1.welcome_round == 0);
  CHECK_THAT(b1.out, Catch::Contains("no saved inner state in " + state_b.path));
  auto saved = load_inner_state(state_b.path);
  REQUIRE(saved.ok());
  REQUIRE(saved->has_value());
  CHECK((*saved)->round == 2);  // tagged with the round the trainer trains next
  CHECK((*saved)->steps_done == 2 * kH);
  CHECK((*saved)->adamw_steps == 2 * kH);
  const Finished b2 = train_once(o, sb, data);
  CHECK(b2.welcome_round == 2);
  CHECK(b2.state_loaded);
  CHECK(b2.resume_step == 2 * kH);
  CHECK_THAT(b2.out, Catch::Contains("inner state: loaded " + inner_state_path(state_b.path) + ": round 2, step 20"));
  CHECK(b2.report.steps == 2 * kH);
  CHECK(restarted.hellos() == 2);

  const auto sa_syncs = uninterrupted.syncs(), sb_syncs = restarted.syncs();
  REQUIRE(sb_syncs.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("round " << i);
    CHECK(sb_syncs[i].sync.round == i);
    CHECK(same_bits(sb_syncs[i].replica, sa_syncs[i].replica));
    CHECK(sb_syncs[i].sync.tokens == sa_syncs[i].sync.tokens);
  }
  CHECK(same_bits(restarted.anchor(), uninterrupted.anchor()));

  // The control: the same restart without a saved state (zero moments) lands elsewhere,
  // though the schedule and the data still resume at step 2H.
  auto path_c = pt::temp_socket_path("train-c");
  pt::FakeDaemon no_state(open_server(path_c, kJob), daemon_config(3));
  SyncedOptions sc = synced_options(path_c);
  train_once(first, sc, data);
  const Finished c2 = train_once(o, sc, data);
  CHECK(c2.welcome_round == 2);
  CHECK_FALSE(c2.state_loaded);
  CHECK(c2.resume_step == 2 * kH);
  CHECK_THAT(c2.out, Catch::Contains("AdamW moments zero"));
  REQUIRE(no_state.syncs().size() == 4);
  CHECK(same_bits(no_state.syncs()[1].replica, sa_syncs[1].replica));  // before the restart: the same
  CHECK_FALSE(same_bits(no_state.syncs()[2].replica, sa_syncs[2].replica));
  CHECK_FALSE(same_bits(no_state.anchor(), uninterrupted.anchor()));
  for (auto* d : {&uninterrupted, &restarted, &no_state}) {
    CHECK(d->failures().empty());
    CHECK(d->refusals().empty());
  }
}

TEST_CASE("the inner state file: round trip, damage and another round refused", "[train][state]") {
  TempDir dir("geoloco-train-sync", /*create=*/false);
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

TEST_CASE("the eval log: one line per anchor, the losses the trainer computes", "[train][eval-log]") {
  cpu::set_blas_threads(1);
  auto data = testing::synthetic_image_dataset();
  const TrainOptions o = mlp_options();
  auto path = pt::temp_socket_path("train-log");
  pt::FakeDaemon daemon(open_server(path, kJob), daemon_config(2));
  TempDir dir("geoloco-train-sync", /*create=*/false);
  std::filesystem::create_directories(dir.path);
  SyncedOptions s = synced_options(path);
  s.eval_log = dir.path + "/eval.jsonl";
  const double before = unix_time_now();
  const Finished f = train_once(o, s, data);
  const double after = unix_time_now();
  REQUIRE(daemon.inits() == 1);
  REQUIRE(daemon.syncs().size() == 3);

  // The first anchor is the trainer's own initialization (the fake daemon adopts INIT as is).
  SingleCollective one;
  auto fresh = Trainer::create(o, one, data);
  REQUIRE(fresh.ok());
  auto initial = (*fresh)->evaluate();
  REQUIRE(initial.ok());

  const auto lines = read_lines(s.eval_log);
  REQUIRE(lines.size() == 3 + 1);  // WELCOME/INIT, then the RESULT of rounds 0, 1, 2 (the last says stop)
  for (std::size_t i = 0; i < lines.size(); ++i) {
    INFO(lines[i]);
    CHECK(field(lines[i], "round") == std::to_string(i));
    const double loss = std::stod(field(lines[i], "eval_loss"));
    CHECK(std::isfinite(loss));
    const double accuracy = std::stod(field(lines[i], "accuracy"));
    CHECK((accuracy >= 0.0 && accuracy <= 1.0));
    CHECK(field(lines[i], "items") == "128");
    const double t = std::stod(field(lines[i], "unix_time"));
    CHECK((t >= before - 0.001 && t <= after + 0.001));
  }
  CHECK(std::stod(field(lines[0], "eval_loss")) == Approx(initial->loss).epsilon(1e-8));
  CHECK(std::stod(field(lines.back(), "eval_loss")) == Approx(f.report.eval.loss).epsilon(1e-8));
  CHECK(std::stod(field(lines.back(), "eval_loss")) < std::stod(field(lines[0], "eval_loss")));

  // A restarted trainer appends: its first line is the anchor it is welcomed with.
  TrainOptions again = o;
  again.steps = 0;  // it only starts: welcome, log, end
  const Finished restarted = train_once(again, s, data);
  CHECK(restarted.welcome_round == 3);
  CHECK_THAT(restarted.out, Catch::Contains("nothing left to train"));
  const auto appended = read_lines(s.eval_log);
  REQUIRE(appended.size() == lines.size() + 1);
  CHECK(field(appended.back(), "round") == "3");
  CHECK(field(appended.back(), "eval_loss") == field(lines.back(), "eval_loss"));
}

TEST_CASE("--eval-rounds N: the first anchor, every Nth round's and the final one are evaluated", "[train][eval-log]") {
  cpu::set_blas_threads(1);
  auto data = testing::synthetic_image_dataset();
  auto path = pt::temp_socket_path("train-log-every");
  pt::FakeDaemon daemon(open_server(path, kJob), daemon_config(4));
  TempDir dir("geoloco-train-sync-every", /*create=*/false);
  std::filesystem::create_directories(dir.path);
  SyncedOptions s = synced_options(path);
  s.eval_log = dir.path + "/eval.jsonl";
  s.eval_rounds = 3;
  TrainOptions o = mlp_options();
  o.steps = 5 * kH;
  const Finished f = train_once(o, s, data);
  REQUIRE(daemon.syncs().size() == 5);  // rounds 0..4, the last says stop
  std::vector<std::string> rounds;
  for (const auto& line : read_lines(s.eval_log)) rounds.push_back(field(line, "round"));
  // The welcome's anchor (round 0), round 3's (a multiple of 3 from the first round), the stop's (5).
  CHECK(rounds == std::vector<std::string>{"0", "3", "5"});
  CHECK(std::stod(field(read_lines(s.eval_log).back(), "eval_loss")) == Approx(f.report.eval.loss).epsilon(1e-8));
  s.eval_rounds = 0;
  CHECK_THAT(s.validate().message(), Catch::Contains("--eval-rounds must be >= 1"));
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

TEST_CASE("reading an eval log: losses and accuracies by round, the later line winning, torn lines skipped",
          "[train][eval-log]") {
  TempDir dir("geoloco-eval-log", /*create=*/true);
  const std::string path = dir.path + "/eval.jsonl";
  CHECK(read_eval_log(path).loss.empty());  // no file yet
  {
    std::ofstream out(path);
    EvalLogEntry e;
    e.round = 0;
    e.eval = EvalResult{2.5, 1, 4};
    e.has_accuracy = true;
    out << eval_log_line(e);
    e.round = 1;
    e.eval = EvalResult{std::nan(""), 0, 4};  // a non-finite loss: null, the line not read
    out << eval_log_line(e);
    e.round = 5;
    out << eval_log_line(e);
    e.round = 1;  // a restarted trainer's line for the same anchor
    e.eval = EvalResult{1.25, 3, 4};
    out << eval_log_line(e);
    e.round = 2;
    e.has_accuracy = false;
    e.eval = EvalResult{1.0, 0, 0};
    out << eval_log_line(e) << "{\"round\": 3, \"eval_lo";  // torn by a crash
  }
  const auto h = read_eval_log(path);
  CHECK(h.loss == std::map<std::uint64_t, double>{{0, 2.5}, {1, 1.25}, {2, 1.0}});
  CHECK(h.accuracy == std::map<std::uint64_t, double>{{0, 0.25}, {1, 0.75}});  // none for round 5
}

TEST_CASE("synced options: H steps or S seconds per round, one of them", "[train][duration]") {
  SyncedOptions s = synced_options("/tmp/x.sock");
  s.sync_seconds = 0.5;
  CHECK_THAT(s.validate().message(), Catch::Contains("--sync-every and --sync-seconds exclude each other"));
  s.sync_every = 0;
  CHECK(s.validate().ok());
  s.sync_seconds = 0.0;
  CHECK_THAT(s.validate().message(), Catch::Contains("--sync-every H (steps per round) or --sync-seconds S"));
}
