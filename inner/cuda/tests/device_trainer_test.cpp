// cuda::DeviceTrainer, what geoloco-train --backend cuda trains with,
// against the CPU Trainer: the same options, seed and data
// (synthetic, so no Debian data package is needed), N steps on each, with
// two micro-batches (the device's gradient accumulation) and clipping on
// every step (the device's norm and scaling).
//
// What must be EXACT, and is checked bit for bit:
//   - the initial parameters (rank 0 initializes on the host, as the CPU does);
//   - per step: the step index, the learning rate, the work units;
//   - the device against itself: two runs give the same bits (no float
//     atomics anywhere), and a trainer restored from a saved state (host
//     parameters, AdamW moments, resume_at) continues with the same bits as
//     the uninterrupted one (what a restarted geoloco-train relies on);
//   - run_training's sync on the device: on_sync sees the replica in host
//     memory, the anchor it writes is what the trainer continues from, and
//     after_sync's evaluation is the anchor's.
// What differs by rounding only, with the tolerances argued at each check:
//   the losses, gradient norms, final parameters and evaluation.
//
// Without a GPU every case prints "SKIPPED: no CUDA device" (gpu_test.h).
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>

#include "common/digest.h"
#include "inner/cpu/blas.h"
#include "inner/cuda/device_trainer.h"
#include "inner/cuda/nccl_collective.h"
#include "inner/cuda/tests/gpu_test.h"
#include "inner/tests/synthetic_data.h"
#include "inner/train/run_training.h"
#include "inner/train/trainer.h"

using namespace geoloco;
using namespace geoloco::inner;
namespace gpu = geoloco::inner::cuda;
using gpu::testing::gpu_or_skip;
using gpu::testing::nmse;
using gpu::testing::ok;

namespace {

constexpr std::uint64_t kSteps = gpu::testing::kMlpSteps;  // the gpt trains as long as the mlp

TrainOptions gpt_options() {
  TrainOptions o;
  o.model = "gpt";
  o.gpt = GptOptions{256, 16, 32, 2, 2};
  o.batch = 4;
  o.micro_batches = 2;
  o.steps = kSteps;
  o.schedule = ScheduleOptions{1e-3, 2, kSteps, 0.1};
  o.clip_norm = 1e-3;
  o.eval_batch = 6;  // 16 evaluation windows: chunks of 6, 6, 4
  o.seed = 5;
  return o;
}

std::shared_ptr<const Dataset> dataset_for(const TrainOptions& o) {
  return o.model == "mlp" ? testing::synthetic_image_dataset() : testing::synthetic_text_dataset(o.gpt.context);
}

std::unique_ptr<gpu::DeviceTrainer> device_trainer(gpu::Context& ctx, const TrainOptions& o, Collective& c,
                                                   std::shared_ptr<const Dataset> data, std::span<float> storage = {},
                                                   bool initialize = true) {
  auto t = gpu::DeviceTrainer::create(ctx, o, c, std::move(data), storage, initialize);
  INFO(t.status().to_string());
  REQUIRE(t.ok());
  return std::move(*t);
}

std::vector<float> host_copy(InnerTrainer& t) {
  ok(t.params_to_host());
  return {t.host_params().begin(), t.host_params().end()};
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

/// The key third of every attention block's qkv bias: adding a constant to
/// every key shifts a softmax row uniformly, so its exact gradient is 0 and
/// AdamW moves it by ±lr on rounding noise, with unrelated signs on the two
/// backends (cuda_backend_test.cpp says the same of its runner test).
std::vector<bool> degenerate_mask(const TrainOptions& o, const ParamLayout& layout) {
  std::vector<bool> mask(layout.total(), false);
  if (o.model != "gpt") return mask;
  for (std::size_t l = 0; l < o.gpt.layers; ++l) {
    const TensorDesc* b = layout.find(cat("h", l, ".attn.qkv.b"));
    REQUIRE(b != nullptr);
    for (std::size_t i = o.gpt.width; i < 2 * o.gpt.width; ++i) mask[b->offset + i] = true;
  }
  return mask;
}

/// NMSE of the device's parameter updates (got − start) against the CPU's
/// (ref − start), over the parameters whose `skip` flag equals `keep_skipped`.
double update_nmse(const std::vector<float>& start, const std::vector<float>& got, std::span<const float> ref,
                   const std::vector<bool>& skip, bool keep_skipped) {
  std::vector<float> du_got, du_ref;
  for (std::size_t i = 0; i < start.size(); ++i) {
    if (skip[i] != keep_skipped) continue;
    du_got.push_back(got[i] - start[i]);
    du_ref.push_back(ref[i] - start[i]);
  }
  return nmse(du_got.data(), du_ref.data(), du_got.size());
}

void compare_with_cpu(gpu::Context& ctx, const TrainOptions& o) {
  cpu::set_blas_threads(1);
  auto data = dataset_for(o);
  SingleCollective cpu_one, gpu_one;
  auto made = Trainer::create(o, cpu_one, data);
  INFO(made.status().to_string());
  REQUIRE(made.ok());
  Trainer& ref = **made;
  auto dev = device_trainer(ctx, o, gpu_one, data);
  CHECK(dev->backend() == "cuda");
  CHECK(dev->layout().total() == ref.layout().total());

  // Rank 0 initializes on the host from the seed, then uploads: the same bits.
  const std::vector<float> start = host_copy(*dev);
  REQUIRE(same_bits(start, ref.params()));

  for (std::uint64_t s = 0; s < kSteps; ++s) {
    INFO(o.model << " step " << s);
    auto a = ref.step();
    auto b = dev->step();
    INFO(b.status().to_string());
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(b->step == a->step);
    CHECK(b->lr == a->lr);  // one function of the step on both
    CHECK(b->work_units == a->work_units);
    CHECK(b->grad_norm > o.clip_norm);  // the clipping branch ran
    // Both trajectories start from the same bits; they drift apart only by
    // fp32 rounding in other summation orders (the runner's losses agree to
    // 1e-5 per step in cuda_backend_test.cpp; AdamW moves each parameter by
    // at most ~lr per step whatever the rounding). 1e-4 after 6 steps is a
    // tenfold margin and still fails any wrong step (a missed micro-batch,
    // a wrong average or clip changes the loss by percents).
    CHECK(b->loss == Approx(a->loss).epsilon(1e-4));
    // The norm of gradients whose per-tensor NMSE is ~1e-11 (the runner
    // test), summed in double in two orders: ~1e-6 relative.
    CHECK(b->grad_norm == Approx(a->grad_norm).epsilon(1e-4));
  }
  CHECK(dev->steps_done() == ref.steps_done());

  const std::vector<float> got = host_copy(*dev);
  const std::vector<bool> skip = degenerate_mask(o, ref.layout());
  // Every update is ~lr per parameter in size; rounding changes it ~1e-6
  // relative, so the NMSE of the updates is ~1e-12; 1e-4 leaves room and
  // still fails a step that updates the wrong parameters or by a wrong amount.
  const double e = update_nmse(start, got, ref.params(), skip, false);
  INFO(o.model << ": NMSE of the parameter updates after " << kSteps << " steps: " << e);
  CHECK(e <= 1e-4);
  if (o.model == "gpt") {
    // The degenerate key biases (0.2% of this model) may differ by up to
    // 2·lr per step; they are held to the runner test's whole-model bound.
    const double all = update_nmse(start, got, ref.params(), std::vector<bool>(skip.size(), false), false);
    INFO("gpt: NMSE of all updates, key biases included: " << all);
    CHECK(all <= 2e-2);
  }

  auto ref_eval = ref.evaluate();
  auto dev_eval = dev->evaluate();
  INFO(dev_eval.status().to_string());
  REQUIRE(ref_eval.ok());
  REQUIRE(dev_eval.ok());
  CHECK(dev_eval->loss == Approx(ref_eval->loss).epsilon(1e-4));
  CHECK(dev_eval->predictions == ref_eval->predictions);
  // Argmax can flip only where two logits are within rounding of each other.
  CHECK(std::abs(static_cast<double>(dev_eval->correct) - static_cast<double>(ref_eval->correct)) <=
        1.0 + 0.01 * static_cast<double>(ref_eval->predictions));

  // The AdamW state as the host sees it (what --state-dir saves).
  auto dev_state = dev->optimizer_state();
  REQUIRE(dev_state.ok());
  CHECK(dev_state->steps == ref.optimizer().steps());
  REQUIRE(dev_state->m.size() == ref.optimizer().first_moment().size());
  REQUIRE(dev_state->v.size() == ref.optimizer().second_moment().size());
}

}  // namespace

TEST_CASE("device trainer: mlp steps match the CPU Trainer", "[cuda][trainer]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  compare_with_cpu(*ctx, gpu::testing::small_mlp_options());
}

TEST_CASE("device trainer: gpt steps match the CPU Trainer", "[cuda][trainer]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  compare_with_cpu(*ctx, gpt_options());
}

TEST_CASE("device trainer: runs repeat bit for bit, and a restored trainer continues them", "[cuda][trainer]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  for (const TrainOptions& o : {gpu::testing::small_mlp_options(), gpt_options()}) {
    INFO(o.model);
    auto data = dataset_for(o);
    SingleCollective one;
    auto a = device_trainer(*ctx, o, one, data);
    auto b = device_trainer(*ctx, o, one, data);
    for (std::uint64_t s = 0; s < 2 * kSteps; ++s) {
      REQUIRE(a->step().ok());
      if (s < kSteps) REQUIRE(b->step().ok());
    }
    // b stops halfway; what a restart keeps: the parameters (the daemon's
    // anchor, host memory), AdamW's moments and step count (the inner state).
    std::vector<float> saved = host_copy(*b);
    auto state = b->optimizer_state();
    REQUIRE(state.ok());
    const std::vector<float> m(state->m.begin(), state->m.end()), v(state->v.begin(), state->v.end());
    const std::uint64_t adamw_steps = state->steps;
    CHECK(adamw_steps == kSteps);

    // The first half: two independent runs, the same bits.
    {
      auto c = device_trainer(*ctx, o, one, data);
      for (std::uint64_t s = 0; s < kSteps; ++s) REQUIRE(c->step().ok());
      CHECK(same_bits(host_copy(*c), saved));
    }
    // A new trainer on the saved parameters (not initialized), its AdamW
    // restored, its data streams resumed at the saved step: the second half
    // comes out as the uninterrupted run's bits.
    auto r = device_trainer(*ctx, o, one, data, saved, /*initialize=*/false);
    CHECK(r->host_params().data() == saved.data());  // the storage is used in place
    ok(r->restore_optimizer(m, v, adamw_steps));
    ok(r->resume_at(kSteps));
    CHECK(r->resume_at(kSteps - 1).code() == Err::invalid_argument);  // cannot go back
    for (std::uint64_t s = 0; s < kSteps; ++s) REQUIRE(r->step().ok());
    const std::vector<float> uninterrupted = host_copy(*a);
    const std::vector<float> resumed = host_copy(*r);
    INFO("digest uninterrupted " << digest_hex(digest_f32(uninterrupted)) << ", resumed "
                                 << digest_hex(digest_f32(resumed)));
    CHECK(same_bits(resumed, uninterrupted));
  }
}

TEST_CASE("device trainer in run_training with NCCL: the sync goes through host memory", "[cuda][trainer][nccl]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  const TrainOptions o = gpu::testing::small_mlp_options();
  auto data = dataset_for(o);
  LaunchInfo launch;  // one worker
  launch.run_id = "device-trainer-test";
  auto made = gpu::NcclCollective::create(launch, *ctx);
  INFO(made.status().to_string());
  REQUIRE(made.ok());
  gpu::NcclCollective& nccl = **made;

  // What a phase of 3 steps leaves, without a sync.
  SingleCollective one;
  auto plain = device_trainer(*ctx, o, one, data);
  for (int s = 0; s < 3; ++s) REQUIRE(plain->step().ok());
  const std::vector<float> replica = host_copy(*plain);

  // The same 3 steps through run_training on an NCCL group of one, with a
  // "daemon" that takes the replica and answers with half of it and stop.
  auto t = device_trainer(*ctx, o, nccl, data);
  std::vector<float> seen, anchor;
  int after_syncs = 0;
  EvalResult after_eval;
  TrainHooks hooks;
  hooks.sync_every = 3;
  hooks.on_sync = [&](SyncPoint& p) -> Status {
    seen.assign(p.params.begin(), p.params.end());
    for (float& x : p.params) x *= 0.5f;  // exact in fp32
    anchor.assign(p.params.begin(), p.params.end());
    p.stop = true;
    return {};
  };
  hooks.after_sync = [&](const SyncPoint&) -> Status {
    ++after_syncs;
    auto e = t->evaluate();
    if (!e.ok()) return e.status();
    after_eval = *e;
    return {};
  };
  auto report = run_training(*t, hooks);
  INFO(report.status().to_string());
  REQUIRE(report.ok());
  CHECK(report->steps == 3);
  CHECK(after_syncs == 1);
  // NCCL over one rank is the identity: the replica handed out is the plain run's bits.
  CHECK(same_bits(seen, replica));
  // The anchor came back to the device (and survived the NCCL broadcast).
  CHECK(same_bits(host_copy(*t), anchor));
  // after_sync ran once the anchor was on the device: its evaluation is the anchor's.
  std::vector<float> anchor_storage = anchor;
  auto at_anchor = device_trainer(*ctx, o, one, data, anchor_storage, /*initialize=*/false);
  auto expected = at_anchor->evaluate();
  REQUIRE(expected.ok());
  CHECK(after_eval.loss == expected->loss);
  CHECK(after_eval.correct == expected->correct);
  CHECK(report->eval.loss == expected->loss);  // the final evaluation after the stop
}

TEST_CASE("device trainer refuses a collective that does not work on device memory", "[cuda][trainer]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  // A stand-in for ShmCollective: host memory only.
  struct HostOnly final : Collective {
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::string backend() const override { return "shm"; }
    Status allreduce_sum(std::span<float>) override { return {}; }
    Status broadcast(std::span<float>, int) override { return {}; }
    Status barrier() override { return {}; }
  } host_only;
  const TrainOptions o = gpu::testing::small_mlp_options();
  auto refused = gpu::DeviceTrainer::create(*ctx, o, host_only, dataset_for(o));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Err::invalid_argument);
  CHECK(refused.status().message().find("got 'shm'") != std::string::npos);

  // An NCCL collective on another Context: the two streams would not order each other.
  auto other = gpu::Context::create();
  REQUIRE(other.ok());
  LaunchInfo launch;
  launch.run_id = "device-trainer-refusal";
  auto nccl = gpu::NcclCollective::create(launch, **other);
  REQUIRE(nccl.ok());
  auto mismatched = gpu::DeviceTrainer::create(*ctx, o, **nccl, dataset_for(o));
  REQUIRE_FALSE(mismatched.ok());
  CHECK(mismatched.status().code() == Err::invalid_argument);

  std::vector<float> short_storage(3);
  SingleCollective one;
  CHECK(gpu::DeviceTrainer::create(*ctx, o, one, dataset_for(o), short_storage).status().code() ==
        Err::invalid_argument);
}
