// The CUDA backend's mlp and gpt runners against the CPU models (loss,
// every gradient tensor, evaluation, a few AdamW training steps), the
// CudaModel interface, and the NCCL collective with one rank. Tolerances and
// skips as in cuda_ops_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "inner/collective/launch.h"
#include "inner/cpu/adamw.h"
#include "inner/cpu/blas.h"
#include "inner/cuda/adamw.cuh"
#include "inner/cuda/cuda_model.h"
#include "inner/cuda/device.h"
#include "inner/cuda/device_model.h"
#include "inner/cuda/nccl_collective.h"
#include "inner/cuda/tests/gpu_test.h"
#include "inner/models/gpt.h"
#include "inner/models/mlp.h"

using namespace geoloco;
using namespace geoloco::inner;
namespace gpu = geoloco::inner::cuda;
using gpu::testing::down;
using gpu::testing::gpu_or_skip;
using gpu::testing::nmse;
using gpu::testing::ok;
using gpu::testing::randint;
using gpu::testing::randn;
using gpu::testing::require_equal;
using gpu::testing::up;

namespace {

/// Runs `steps` AdamW steps of the CPU model and of its device runner from
/// the same parameters on the same batches, comparing the loss and every
/// gradient tensor at the first step, evaluation, and the parameters after.
void compare_model(gpu::Context& ctx, Model& cpu_model, const std::vector<Batch>& batches, double grad_nmse) {
  auto runner = gpu::make_device_model(ctx, cpu_model);
  INFO(runner.status().to_string());
  REQUIRE(runner.ok());
  gpu::DeviceModel& dev = **runner;
  const ParamLayout& layout = cpu_model.layout();
  REQUIRE(dev.layout().total() == layout.total());

  std::vector<float> params(layout.total()), grads(layout.total());
  cpu_model.init(params, 7);
  // Noise on every parameter, so gains differ from 1 and biases from 0 and
  // every term of the backward passes matters.
  const auto jitter = randn(params.size(), 8, 0.02);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += jitter[i];
  const std::vector<float> start = params;
  auto g_params = up(ctx, params);
  gpu::DeviceBuffer<float> g_grads;
  ok(g_grads.allocate(layout.total()));
  // Garbage in the gradient buffer: forward_backward must overwrite it.
  ok(g_grads.assign(std::vector<float>(layout.total(), 7.0f), ctx.stream()));

  cpu::AdamWOptions options;
  cpu::AdamW cpu_opt(layout.total(), options, cpu_model.decay_ranges());
  auto made = gpu::AdamW::create(ctx, layout.total(), options, cpu_model.decay_ranges());
  REQUIRE(made.ok());
  gpu::AdamW& gpu_opt = **made;
  const double lr = 1e-3;

  for (std::size_t step = 0; step < batches.size(); ++step) {
    INFO(cpu_model.name() << " step " << step);
    auto cpu_loss = cpu_model.forward_backward(params, batches[step], grads);
    REQUIRE(cpu_loss.ok());
    ok(dev.upload(batches[step]));
    auto gpu_loss = dev.forward_backward(g_params.data(), g_grads.data());
    INFO(gpu_loss.status().to_string());
    REQUIRE(gpu_loss.ok());
    // The loss after a whole network of reassociated fp32 sums.
    CHECK(*gpu_loss == Approx(*cpu_loss).epsilon(1e-5));
    if (step == 0) {
      const auto g = down(ctx, g_grads);
      for (const TensorDesc& t : layout.tensors()) {
        const double e = nmse(g.data() + t.offset, grads.data() + t.offset, t.size());
        INFO("gradient of " << t.name << ": NMSE " << e << " (bound " << grad_nmse << ")");
        CHECK(e <= grad_nmse);
      }
      auto cpu_eval = cpu_model.evaluate(params, batches[step]);
      auto gpu_eval = dev.evaluate(g_params.data());
      REQUIRE(cpu_eval.ok());
      REQUIRE(gpu_eval.ok());
      CHECK(gpu_eval->loss == Approx(cpu_eval->loss).epsilon(1e-5));
      CHECK(gpu_eval->predictions == cpu_eval->predictions);
      // Argmax can flip only where two logits are within rounding of each other.
      CHECK(std::abs(static_cast<double>(gpu_eval->correct) - static_cast<double>(cpu_eval->correct)) <=
            1.0 + 0.01 * static_cast<double>(cpu_eval->predictions));
    }
    ok(cpu_opt.step(params, grads, lr));
    ok(gpu_opt.step(ctx, g_params.data(), g_grads.data(), lr));
  }
  // AdamW's first steps move each parameter by about ±lr whatever the
  // gradient's size, so a gradient that is 0 up to rounding moves the two
  // sides by ±lr with unrelated signs. gpt has such parameters by
  // construction: the key third of each qkv bias (adding a constant to every
  // key shifts a softmax row uniformly, so its exact gradient is 0), about
  // 0.1% of the test model, which alone can reach NMSE ~5e-3. The per-step
  // losses above are the tight check of the trajectory (those parameters do
  // not change the loss); this bound catches an update that is wrong.
  const auto got = down(ctx, g_params);
  std::vector<float> du_gpu(params.size()), du_cpu(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) du_gpu[i] = got[i] - start[i], du_cpu[i] = params[i] - start[i];
  const double e = nmse(du_gpu.data(), du_cpu.data(), params.size());
  INFO(cpu_model.name() << ": NMSE of the parameter updates after " << batches.size() << " steps: " << e);
  CHECK(e <= 2e-2);
}

}  // namespace

TEST_CASE("cuda mlp runner: loss, gradients and AdamW steps match the CPU model", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  cpu::set_blas_threads(1);
  MlpOptions o;
  o.inputs = 100;
  o.hidden = {64, 33};
  o.classes = 10;
  auto model = Mlp::create(o);
  REQUIRE(model.ok());
  std::vector<Batch> batches;
  for (std::uint64_t s = 0; s < 4; ++s) {
    Batch b;
    b.samples = 24;
    b.features = randn(b.samples * o.inputs, 100 + s);
    b.targets = randint(b.samples, 200 + s, o.classes);
    batches.push_back(std::move(b));
  }
  // Four products of length ≤ 100: per-tensor NMSE ~1e-12 expected.
  compare_model(*ctx, **model, batches, 1e-8);
}

TEST_CASE("cuda gpt runner: loss, gradients and AdamW steps match the CPU model", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  cpu::set_blas_threads(1);
  GptOptions o;
  o.vocab = 256;
  o.context = 24;
  o.width = 48;
  o.layers = 2;
  o.heads = 3;
  auto model = Gpt::create(o);
  REQUIRE(model.ok());
  std::vector<Batch> batches;
  for (std::uint64_t s = 0; s < 4; ++s) {
    Batch b;
    b.samples = 3;
    // A small alphabet, so tokens repeat (the embedding's scatter) as in text.
    b.tokens = randint(b.samples * o.context, 300 + s, 20);
    b.targets = randint(b.samples * o.context, 400 + s, 20);
    batches.push_back(std::move(b));
  }
  // Two blocks of attention, layernorm and GELU: NMSE ~1e-11 expected per tensor.
  compare_model(*ctx, **model, batches, 1e-7);

  {  // With TF32 the loss and gradients stay close (10-bit inputs: looser bounds).
    ctx->set_tf32(true);
    auto runner = gpu::make_device_model(*ctx, **model);
    REQUIRE(runner.ok());
    std::vector<float> params((*model)->layout().total()), grads(params.size());
    (*model)->init(params, 9);
    auto cpu_loss = (*model)->forward_backward(params, batches[0], grads);
    REQUIRE(cpu_loss.ok());
    auto g_params = up(*ctx, params);
    gpu::DeviceBuffer<float> g_grads;
    ok(g_grads.allocate(params.size()));
    ok((*runner)->upload(batches[0]));
    auto loss = (*runner)->forward_backward(g_params.data(), g_grads.data());
    REQUIRE(loss.ok());
    CHECK(*loss == Approx(*cpu_loss).epsilon(1e-3));
    const auto g = down(*ctx, g_grads);
    const double e = nmse(g.data(), grads.data(), grads.size());
    INFO("TF32 gradient NMSE " << e);
    CHECK(e <= 1e-4);
    ctx->set_tf32(false);
  }
}

TEST_CASE("CudaModel answers the Model interface with host buffers as the CPU model does", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  cpu::set_blas_threads(1);
  MlpOptions o;
  o.inputs = 50, o.hidden = {40}, o.classes = 10;
  auto reference = Mlp::create(o);
  auto twin = Mlp::create(o);
  REQUIRE(reference.ok());
  REQUIRE(twin.ok());
  auto made = gpu::CudaModel::create(*ctx, std::move(*twin));
  INFO(made.status().to_string());
  REQUIRE(made.ok());
  Model& model = **made;
  CHECK(model.name() == "mlp");
  CHECK(model.layout().total() == (*reference)->layout().total());
  CHECK(model.work_unit_name() == "samples");
  std::vector<float> params(model.layout().total()), grads(params.size(), 7.0f), ref_grads(params.size());
  model.init(params, 3);
  Batch b;
  b.samples = 16;
  b.features = randn(b.samples * o.inputs, 81);
  b.targets = randint(b.samples, 82, o.classes);
  auto loss = model.forward_backward(params, b, grads);
  auto ref_loss = (*reference)->forward_backward(params, b, ref_grads);
  REQUIRE(loss.ok());
  REQUIRE(ref_loss.ok());
  CHECK(*loss == Approx(*ref_loss).epsilon(1e-5));
  const double e = nmse(grads.data(), ref_grads.data(), grads.size());
  INFO("gradient NMSE " << e);
  CHECK(e <= 1e-8);
  auto eval = model.evaluate(params, b);
  REQUIRE(eval.ok());
  CHECK(eval->loss == Approx(*ref_loss).epsilon(1e-5));
  CHECK(eval->predictions == 16);
  // Refusals come before any copy, with the CPU model's codes.
  std::vector<float> short_grads(3);
  CHECK(model.forward_backward(params, b, short_grads).status().code() == Err::invalid_argument);
  b.targets[0] = 10;
  CHECK(model.forward_backward(params, b, grads).status().code() == Err::invalid_argument);
}

TEST_CASE("cuda runners refuse bad batches as the CPU models do", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  GptOptions o;
  o.context = 8, o.width = 16, o.layers = 1, o.heads = 2;
  auto model = Gpt::create(o);
  REQUIRE(model.ok());
  auto runner = gpu::make_device_model(*ctx, **model);
  REQUIRE(runner.ok());
  std::vector<float> none(1);
  auto early = (*runner)->forward_backward(none.data(), none.data());
  REQUIRE_FALSE(early.ok());
  CHECK(early.status().code() == Err::invalid_argument);  // no batch yet: refused before touching the pointers
  Batch b;
  b.samples = 1;
  b.tokens.assign(8, 1);
  b.targets.assign(8, 1);
  b.tokens[3] = 256;
  const Status s = (*runner)->upload(b);
  CHECK(s.code() == Err::invalid_argument);
  CHECK(s.message().find("token 256") != std::string::npos);
  b.tokens.pop_back();
  CHECK((*runner)->upload(b).code() == Err::invalid_argument);
}

TEST_CASE("nccl collective with one rank: identity all-reduce, average, broadcast, barrier, host spans",
          "[cuda][nccl]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  LaunchInfo launch;  // a single worker, as launch_info_from_env() gives without a launcher
  launch.run_id = "cuda-backend-test";
  auto made = gpu::NcclCollective::create(launch, *ctx);
  INFO(made.status().to_string());
  REQUIRE(made.ok());
  gpu::NcclCollective& c = **made;
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  CHECK(c.backend() == "nccl");
  const auto x = randn(1 << 16, 71);
  auto d = up(*ctx, x);
  ok(c.allreduce_sum(std::span<float>(d.data(), d.size())));
  require_equal("allreduce_sum over one rank", down(*ctx, d), x);
  ok(c.allreduce_average(std::span<float>(d.data(), d.size())));
  require_equal("allreduce_average over one rank", down(*ctx, d), x);
  ok(c.broadcast(std::span<float>(d.data(), d.size()), 0));
  require_equal("broadcast from rank 0", down(*ctx, d), x);
  CHECK(c.broadcast(std::span<float>(d.data(), d.size()), 1).code() == Err::invalid_argument);
  ok(c.barrier());
  // Host spans (the training loop's flags, counters and loss) are staged
  // through a device buffer and come back unchanged from a group of one.
  std::vector<float> host = {1.5f, -2.0f, 3.25f, 1e-30f};
  const std::vector<float> host0 = host;
  ok(c.allreduce_sum(host));
  require_equal("allreduce_sum of a host span over one rank", host, host0);
  ok(c.broadcast(host, 0));
  require_equal("broadcast of a host span from rank 0", host, host0);
  std::vector<float> none;
  ok(c.allreduce_sum(none));  // nothing to exchange, no pointer to ask about
  CHECK(gpu::local_device(LaunchInfo{3, 4, 3, 4, "mpirun", "x"}, 2) == 1);
}
