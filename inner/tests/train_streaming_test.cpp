// geoloco-train's Streaming DiLoCo (inner/train/streaming.h), in process: a
// trainer against the protocol's fake daemon in its streaming mode
// (geolocod's round numbering: F = 3, first round 1, fragment 1 syncs in
// round 1, 2 in 2, 0 in 3, ...) on synthetic data. A recording trainer
// (the CPU Trainer behind a decorator) keeps a copy of the parameters at
// every params_to_host / params_from_host, so the tests see the replica at
// each sync, the local values before each merge and the merged values, and
// compare them with what the daemon read and wrote, bit for bit.
//   * the order of SYNCs (round, fragment), the step of each, its tokens;
//   * the merge: α = 0 takes the daemon's values exactly, α = 0.5 the formula,
//     the other fragments untouched; τ steps after the sync;
//   * the eval log (a period's end and the stop) and the state's tag;
//   * a restarted trainer resumes at the streaming schedule's step;
//   * 2 workers end with the same parameters;
//   * refusals (τ longer than the shortest phase, time-based phases) and
//     the pure decisions.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/digest.h"
#include "inner/collective/launch.h"
#include "inner/collective/shm_collective.h"
#include "inner/cpu/blas.h"
#include "inner/protocol/layout.h"
#include "diloco/fragments.h"
#include "inner/protocol/tests/test_daemon.h"
#include "inner/tests/fork_ranks.h"
#include "inner/tests/synthetic_data.h"
#include "inner/tests/sync_helpers.h"
#include "inner/tests/temp_files.h"
#include "inner/train/inner_state.h"
#include "inner/train/streaming.h"
#include "inner/train/synced_training.h"

using namespace geoloco;
using namespace geoloco::inner;
using namespace geoloco::inner::testing;
namespace pt = geoloco::inner::protocol::testing;

namespace {

constexpr std::uint64_t kH = 6;  // a period: 3 phases of 2 steps
constexpr std::uint32_t kFragments = 3;
constexpr std::uint64_t kBatch = 32;
const std::string kJob = "train-streaming-test";

TrainOptions mlp_options() {
  TrainOptions o;
  o.model = "mlp";
  o.mlp = MlpOptions{16, {32, 16}, 10};  // 6 tensors: 3 fragments of whole tensors
  o.batch = kBatch;
  o.steps = 100;
  o.schedule = ScheduleOptions{1e-2, 5, 100, 0.1};
  o.seed = 7;
  o.eval_batch = 64;
  return o;
}

pt::FakeDaemonConfig streaming_daemon(std::uint64_t stop_after_round) {
  pt::FakeDaemonConfig c;
  c.fragments = kFragments;
  c.streaming = true;
  c.first_round = 1;
  c.eta = 0.5f;  // anchor ← anchor − 0.5·(anchor − replica): neither the anchor nor the replica
  c.stop_after_round = stop_after_round;
  c.deadline_ms = 60'000;
  return c;
}

SyncedOptions streaming_options(const std::string& path, std::uint64_t overlap, double alpha) {
  SyncedOptions s;
  s.socket_path = path;
  s.job = kJob;
  s.sync_every = kH;
  s.first_round = 1;
  s.overlap_steps = overlap;
  s.alpha = alpha;
  s.timeout_ms = 20'000;
  return s;
}

// The CPU Trainer, with a copy of the host parameters at every crossing
// between the trainer and rank 0's host side.
class RecordingTrainer final : public InnerTrainer {
 public:
  struct Crossing {
    bool to_host = false;  // params_to_host (else params_from_host)
    std::uint64_t step = 0;
    std::vector<float> params;
  };
  explicit RecordingTrainer(std::unique_ptr<InnerTrainer> inner) : inner_(std::move(inner)) {}
  static TrainerFactory factory() {
    return [](const TrainOptions& o, Collective& c, std::shared_ptr<const Dataset> d, std::span<float> storage,
              bool initialize) -> Result<std::unique_ptr<InnerTrainer>> {
      auto t = Trainer::factory()(o, c, std::move(d), storage, initialize);
      if (!t.ok()) return t.status();
      return std::unique_ptr<InnerTrainer>(new RecordingTrainer(std::move(*t)));
    };
  }
  std::vector<Crossing> crossings;

  std::string backend() const override { return inner_->backend(); }
  const TrainOptions& options() const override { return inner_->options(); }
  const ParamLayout& layout() const override { return inner_->layout(); }
  const Model& model() const override { return inner_->model(); }
  const Dataset& dataset() const override { return inner_->dataset(); }
  Collective& collective() override { return inner_->collective(); }
  std::uint64_t steps_done() const override { return inner_->steps_done(); }
  Status resume_at(std::uint64_t step) override { return inner_->resume_at(step); }
  Result<StepStats> step() override { return inner_->step(); }
  Result<EvalResult> evaluate() override { return inner_->evaluate(); }
  std::span<float> host_params() override { return inner_->host_params(); }
  Status params_to_host() override {
    GEOLOCO_TRY(inner_->params_to_host());
    record(true);
    return {};
  }
  Status params_from_host() override {
    record(false);
    return inner_->params_from_host();
  }
  Status broadcast_params(int root) override { return inner_->broadcast_params(root); }
  Result<OptimizerState> optimizer_state() override { return inner_->optimizer_state(); }
  Status restore_optimizer(std::span<const float> m, std::span<const float> v, std::uint64_t steps) override {
    return inner_->restore_optimizer(m, v, steps);
  }

 private:
  void record(bool to_host) {
    auto p = inner_->host_params();
    crossings.push_back({to_host, inner_->steps_done(), {p.begin(), p.end()}});
  }
  std::unique_ptr<InnerTrainer> inner_;
};

struct Run {
  TrainReport report;
  std::vector<RecordingTrainer::Crossing> crossings;
  std::uint64_t welcome_round = 0, resume_step = 0;
  bool streaming = false;
  std::string out;
};

Run train_once(const TrainOptions& o, const SyncedOptions& s) {
  SingleCollective one;
  std::ostringstream out;
  auto run = SyncedTraining::start(o, s, one, testing::synthetic_image_dataset(), out, RecordingTrainer::factory());
  INFO(out.str());
  REQUIRE(run.ok());
  auto report = (*run)->run({});
  INFO(out.str());
  REQUIRE(report.ok());
  auto& t = dynamic_cast<RecordingTrainer&>((*run)->trainer());
  return {*report, t.crossings, (*run)->welcome_round(), (*run)->resume_step(), (*run)->streaming(), out.str()};
}

// The fragment table the fake daemon cuts (the same split_fragments call).
std::vector<protocol::FragmentDesc> fragment_table(const TrainOptions& o) {
  auto model = make_model(o);
  REQUIRE(model.ok());
  auto table = protocol::split_fragments((*model)->layout().tensors(), kFragments, 0);
  REQUIRE(table.ok());
  return *table;
}

std::span<const float> part(const std::vector<float>& v, const protocol::FragmentDesc& f) {
  return std::span<const float>(v).subspan(f.offset, f.length);
}

// Checks one whole streaming run of rounds 1..6 (two periods) with overlap τ
// and weight α against what the fake daemon saw.
void check_streaming_run(std::uint64_t overlap, double alpha) {
  INFO("overlap " << overlap << ", alpha " << alpha);
  cpu::set_blas_threads(1);
  const TrainOptions o = mlp_options();
  const auto table = fragment_table(o);
  auto path = pt::temp_socket_path("stream");
  pt::FakeDaemon daemon(open_server(path, kJob), streaming_daemon(6));  // the RESULT of round 6 says stop
  TempDir dir("geoloco-train-streaming");
  SyncedOptions s = streaming_options(path, overlap, alpha);
  s.eval_log = dir.path + "/eval.jsonl";
  s.state_dir = dir.path + "/inner";
  const Run run = train_once(o, s);
  INFO(run.out);
  CHECK(run.streaming);
  CHECK(run.welcome_round == 1);
  CHECK(run.resume_step == 0);
  CHECK(daemon.inits() == 1);  // the trainer's own initialization became the anchor
  CHECK(daemon.failures().empty());
  CHECK(daemon.refusals().empty());
  // Training ends after the stop's merge: τ steps after the last sync at step 12.
  CHECK(run.report.steps == 12 + overlap);

  // SYNCs: round k syncs fragment k mod 3, after 2k steps, with the tokens of the 2 steps since the previous SYNC.
  const auto syncs = daemon.syncs();
  REQUIRE(syncs.size() == 6);
  const std::uint32_t want_fragment[] = {1, 2, 0, 1, 2, 0};
  for (std::size_t i = 0; i < syncs.size(); ++i) {
    INFO("SYNC " << i);
    CHECK(syncs[i].sync.round == i + 1);
    CHECK(syncs[i].sync.fragment == want_fragment[i]);
    CHECK(syncs[i].sync.tokens == 2 * kBatch);
    CHECK(std::isfinite(syncs[i].sync.loss));
  }

  // Rank 0's crossings: INIT (to host), the welcome's anchor (from host), then per round
  // the sync (to host, at step 2k), and the merge: local (to host) and merged (from host) at 2k + τ.
  const auto& c = run.crossings;
  REQUIRE(c.size() == 2 + 6 * 3);
  CHECK(c[0].to_host);
  CHECK_FALSE(c[1].to_host);
  CHECK(same_bits(c[1].params, c[0].params));  // the fake daemon adopts INIT as is
  for (std::size_t i = 0; i < 6; ++i) {
    INFO("round " << i + 1);
    const auto& at_sync = c[2 + 3 * i];
    const auto& local = c[3 + 3 * i];
    const auto& merged = c[4 + 3 * i];
    REQUIRE((at_sync.to_host && local.to_host && !merged.to_host));
    CHECK(at_sync.step == 2 * (i + 1));
    CHECK(local.step == 2 * (i + 1) + overlap);
    CHECK(merged.step == local.step);
    const auto& f = table[syncs[i].sync.fragment];
    // The daemon read the fragment of the replica at the sync, and nothing else moved in the segment.
    CHECK(same_bits(syncs[i].replica, part(at_sync.params, f)));
    // τ = 0: the merge sees the replica of the sync; τ = 1: one step later.
    CHECK(same_bits(part(local.params, f), part(at_sync.params, f)) == (overlap == 0));
    // The merge: θ_f ← α·local + (1 − α)·global; the other fragments as they were.
    std::vector<float> want(local.params.begin() + static_cast<std::ptrdiff_t>(f.offset),
                            local.params.begin() + static_cast<std::ptrdiff_t>(f.offset + f.length));
    for (std::size_t k = 0; k < want.size(); ++k)
      want[k] = static_cast<float>(alpha * static_cast<double>(want[k]) +
                                   (1.0 - alpha) * static_cast<double>(syncs[i].anchor_after[k]));
    CHECK(same_bits(part(merged.params, f), want));
    if (alpha == 0.0) CHECK(same_bits(part(merged.params, f), syncs[i].anchor_after));
    if (alpha > 0.0) CHECK_FALSE(same_bits(part(merged.params, f), syncs[i].anchor_after));
    for (const auto& g : table)
      if (g.offset != f.offset) CHECK(same_bits(part(merged.params, g), part(local.params, g)));
  }

  // The eval log: the welcome's anchor (round 1), the end of the first period (round 3 merged:
  // round 4), the stop (round 6 merged: round 7); the last line is the final evaluation.
  const auto lines = read_lines(s.eval_log);
  REQUIRE(lines.size() == 3);
  CHECK(field(lines[0], "round") == "1");
  CHECK(field(lines[1], "round") == "4");
  CHECK(field(lines[2], "round") == "7");
  CHECK(std::stod(field(lines[2], "eval_loss")) == Approx(run.report.eval.loss).epsilon(1e-8));

  // The state after the last merge: tagged with the next sync round (fragment 1's 7).
  auto state = load_inner_state(s.state_dir);
  REQUIRE(state.ok());
  REQUIRE(state->has_value());
  CHECK((*state)->round == 7);
  CHECK((*state)->steps_done == 12 + overlap);
}

}  // namespace

TEST_CASE("streaming, tau 1 and alpha 0.5: SYNC order, steps, tokens, the merge formula", "[train][streaming]") {
  check_streaming_run(1, 0.5);
}

TEST_CASE("streaming, tau 0 and alpha 0: the merge takes the daemon's values bit for bit", "[train][streaming]") {
  check_streaming_run(0, 0.0);
}

TEST_CASE("streaming: a trainer restarted at round 4 resumes at step 6 and syncs rounds 4, 5, 6",
          "[train][streaming][resume]") {
  cpu::set_blas_threads(1);
  auto path = pt::temp_socket_path("stream-restart");
  pt::FakeDaemon daemon(open_server(path, kJob), streaming_daemon(6));
  const SyncedOptions s = streaming_options(path, 0, 0.0);
  TrainOptions first = mlp_options();
  first.steps = 6;  // rounds 1..3, then its --steps run out
  const Run a = train_once(first, s);
  CHECK(a.report.steps == 6);
  REQUIRE(daemon.syncs().size() == 3);
  const Run b = train_once(mlp_options(), s);
  INFO(b.out);
  CHECK(b.welcome_round == 4);
  CHECK(b.resume_step == 6);  // steps_through_round(3, 3, 6), not (4 − 1)·H
  CHECK_THAT(b.out, Catch::Contains("welcomed at round 4 (first round 1): schedule and data from step 6"));
  CHECK(b.report.steps == 6);
  const auto syncs = daemon.syncs();
  REQUIRE(syncs.size() == 6);
  for (std::size_t i = 3; i < 6; ++i) {
    CHECK(syncs[i].sync.round == i + 1);
    CHECK(syncs[i].sync.fragment == diloco::fragment_of_round(i + 1, kFragments));
    CHECK(syncs[i].sync.tokens == 2 * kBatch);
  }
  CHECK(daemon.hellos() == 2);
  CHECK(daemon.refusals().empty());
}

TEST_CASE("streaming with 2 workers: both take the same steps and end with the same parameters",
          "[train][streaming][workers]") {
  TrainOptions o = mlp_options();
  o.batch = 8;
  auto path = pt::temp_socket_path("stream-workers");
  pt::FakeDaemon daemon(open_server(path, kJob), streaming_daemon(6));
  const SyncedOptions s = streaming_options(path, 1, 0.5);
  const std::string prefix = "/tmp/geoloco_train_streaming_" + std::to_string(::getpid()) + "_";
  auto codes = testing::fork_ranks(2, [&](int rank) {
    auto c = rank_collective();
    if (!c.ok()) return 2;
    std::ostringstream out;
    auto run = SyncedTraining::start(o, s, **c, testing::synthetic_image_dataset(), out);
    if (!run.ok()) return 3;
    auto report = (*run)->run({});
    if (!report.ok()) return 4;
    if (report->steps != 13) return 5;
    InnerTrainer& t = (*run)->trainer();
    if (!t.params_to_host().ok()) return 6;
    std::ofstream(prefix + std::to_string(rank)) << digest_hex(digest_f32(t.host_params()));
    return 0;
  });
  REQUIRE(codes == std::vector<int>{0, 0});
  const auto d0 = read_lines(prefix + "0"), d1 = read_lines(prefix + "1");
  REQUIRE(d0.size() == 1);
  CHECK(d0 == d1);
  std::filesystem::remove(prefix + "0");
  std::filesystem::remove(prefix + "1");
  const auto syncs = daemon.syncs();
  REQUIRE(syncs.size() == 6);
  for (const auto& y : syncs) CHECK(y.sync.tokens == 2 * 2 * o.batch);  // 2 steps of 2 workers
  CHECK(syncs.back().sync.round == 6);
  CHECK(syncs.back().sync.fragment == 0);
}

TEST_CASE("streaming refuses an overlap longer than the shortest phase, before training", "[train][streaming]") {
  cpu::set_blas_threads(1);
  auto path = pt::temp_socket_path("stream-refuse");
  pt::FakeDaemon daemon(open_server(path, kJob), streaming_daemon(6));
  SingleCollective one;
  std::ostringstream out;
  auto run = SyncedTraining::start(mlp_options(), streaming_options(path, 3, 0.0), one,
                                   testing::synthetic_image_dataset(), out);
  REQUIRE_FALSE(run.ok());
  CHECK(run.status().code() == Err::invalid_argument);
  CHECK_THAT(run.status().message(),
             Catch::Contains("--overlap 3 is longer than the smallest phase (H/F = 6/3 = 2 steps): one fragment in "
                             "flight at a time"));
  CHECK(daemon.syncs().empty());
}

TEST_CASE("streaming decisions: the mode, the refusals, the rounds, the phases, the merge", "[train][streaming]") {
  using protocol::FragmentDesc;
  const std::vector<FragmentDesc> together{{0, 4, 5}, {4, 4, 5}, {8, 4, 5}};
  const std::vector<FragmentDesc> in_turn{{0, 4, 3}, {4, 4, 1}, {8, 4, 2}};
  // Plain: one round for all, τ = α = 0 (today's path, time-based phases too).
  auto plain = plan_sync(together, 6, 0.0, 0, 0.0);
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->streaming);
  CHECK(plan_sync(together, 0, 2.5, 0, 0.0).ok());
  // Streaming: fragments in turn, or τ or α with one round.
  auto turns = plan_sync(in_turn, 6, 0.0, 2, 0.0);
  REQUIRE(turns.ok());
  CHECK(turns->streaming);
  CHECK(turns->schedule_fragments == 3);
  auto weighted = plan_sync(together, 6, 0.0, 0, 0.5);
  REQUIRE(weighted.ok());
  CHECK(weighted->streaming);
  CHECK(weighted->schedule_fragments == 1);
  CHECK(plan_sync(together, 6, 0.0, 6, 0.0).ok());  // F = 1: τ up to H
  CHECK_THAT(plan_sync(together, 6, 0.0, 7, 0.0).status().message(),
             Catch::Contains("--overlap 7 is longer than the smallest phase (H/F = 6/1 = 6 steps)"));
  CHECK_THAT(plan_sync(in_turn, 7, 0.0, 3, 0.0).status().message(),
             Catch::Contains("--overlap 3 is longer than the smallest phase (H/F = 7/3 = 2 steps)"));
  const Status timed = plan_sync(in_turn, 0, 2.5, 0, 0.0).status();
  CHECK(timed.code() == Err::invalid_argument);
  CHECK_THAT(timed.message(), Catch::Contains("streaming (3 fragments that sync in turn) needs step-based phases: use "
                                              "--sync-every H instead of --sync-seconds"));
  CHECK_THAT(plan_sync(in_turn, 2, 0.0, 0, 0.0).status().message(),
             Catch::Contains("--sync-every 2 is smaller than the job's 3 fragments"));
  CHECK(plan_sync(together, 6, 0.0, 0, 1.5).status().code() == Err::invalid_argument);

  const std::vector<std::uint64_t> rounds{6, 4, 5};
  CHECK(sync_round(rounds) == 4);
  CHECK(fragments_due(rounds) == std::vector<std::uint32_t>{1});
  CHECK(fragments_due(std::vector<std::uint64_t>{9, 9}) == std::vector<std::uint32_t>{0, 1});
  CHECK(steps_before_round(4, 1, 6, 3) == 6);
  CHECK(steps_before_round(5, 1, 6, 3) == 8);
  CHECK(steps_before_round(3, 1, 6) == 12);  // F = 1: (round − first)·H, as before
  CHECK(steps_before_round(1, 1, 6, 3) == 0);
}

TEST_CASE("synced options: --alpha in [0, 1], --overlap within a round, neither with --sync-seconds",
          "[train][streaming]") {
  SyncedOptions s = streaming_options("/tmp/x.sock", 0, 0.0);
  CHECK(s.validate().ok());
  s.alpha = 1.01;
  CHECK_THAT(s.validate().message(), Catch::Contains("--alpha must be in [0, 1]"));
  s.alpha = std::nan("");
  CHECK(s.validate().code() == Err::invalid_argument);
  s.alpha = 0.5;
  s.overlap_steps = kH + 1;
  CHECK_THAT(s.validate().message(), Catch::Contains("--overlap 7 is longer than a round's inner phase"));
  s.overlap_steps = 1;
  s.sync_every = 0;
  s.sync_seconds = 1.0;
  CHECK_THAT(s.validate().message(), Catch::Contains("--overlap, --alpha and --merge delayed need step-based phases"));

  SyncedOptions d = streaming_options("/tmp/x.sock", 3, 0.0);
  d.merge_delayed = true;
  CHECK(d.validate().ok());
  d.alpha = 0.5;
  CHECK_THAT(d.validate().message(), Catch::Contains("--merge delayed keeps the local progress; --alpha weighs"));
  d.alpha = 0.0;
  d.overlap_steps = 0;
  d.sync_every = 0;
  d.sync_seconds = 1.0;
  CHECK_THAT(d.validate().message(), Catch::Contains("--merge delayed need step-based phases"));
}
