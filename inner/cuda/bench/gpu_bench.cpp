// geoloco-gpu-bench: training throughput of `gpt` on one GPU through the CUDA
// backend (forward, backward, AdamW; the loss read back every step as the
// trainer does), printed as tokens/s and model FLOP utilization.
//
// MFU = model FLOP/s (Model::train_flops: the matrix products and attention,
// backward counted twice the forward) over a peak. Two peaks are printed:
//   - the fp32 datasheet figure computed from the device (SMs × FP32 lanes ×
//     2 × clock), or --peak-tflops when given (e.g. the TF32 tensor-core peak);
//   - the practical peak: a large cuBLAS gemm of the same precision timed in
//     this run, so the ratio says how much of what cuBLAS reaches the whole
//     training step keeps.
// Tokens are random bytes: throughput does not depend on the text.
#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "inner/cuda/adamw.cuh"
#include "inner/cuda/blas.h"
#include "inner/cuda/device.h"
#include "inner/cuda/device_model.h"
#include "inner/models/gpt.h"
#include "inner/rng.h"

using namespace geoloco;
using namespace geoloco::inner;
namespace gpu = geoloco::inner::cuda;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  GptOptions gpt{256, 1024, 768, 12, 12};  // GPT-2 small's shape over bytes
  std::size_t batch = 8;
  int warmup = 2;
  int steps = 10;
  int gemm_size = 8192;
  std::string tf32 = "both";  // off | on | both
  double peak_tflops = 0.0;
};

struct Device {
  std::string name;
  int sms = 0, major = 0, minor = 0;
  double clock_ghz = 0.0;
  /// FP32 FLOP/s from the SIMT lanes: 64 per SM on sm_80 (A100), 128 on
  /// sm_86 and later (including sm_90, H100/H200).
  double fp32_peak() const { return sms * (major == 8 && minor == 0 ? 64.0 : 128.0) * 2.0 * clock_ghz * 1e9; }
};

Result<Device> describe(int device) {
  Device d;
  cudaDeviceProp prop{};
  GEOLOCO_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  d.name = prop.name;
  d.major = prop.major;
  d.minor = prop.minor;
  d.sms = prop.multiProcessorCount;
  int khz = 0;
  GEOLOCO_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  d.clock_ghz = khz / 1e6;
  return d;
}

/// FLOP/s of an n×n×n gemm in the Context's current precision.
Result<double> gemm_peak(gpu::Context& ctx, int n) {
  const std::size_t count = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<float> host(count);
  Rng rng(1);
  for (float& x : host) x = static_cast<float>(rng.uniform() - 0.5);  // real values: zeros would flatter the clocks
  gpu::DeviceBuffer<float> a, b, c;
  GEOLOCO_TRY(a.assign(host, ctx.stream()));
  GEOLOCO_TRY(b.assign(host, ctx.stream()));
  GEOLOCO_TRY(c.allocate(count));
  const auto run = [&] {
    return gpu::gemm(ctx, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  GEOLOCO_TRY(run());  // cuBLAS picks and loads its kernel
  GEOLOCO_TRY(ctx.synchronize());
  const int reps = ctx.tf32() ? 20 : 5;
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) GEOLOCO_TRY(run());
  GEOLOCO_TRY(ctx.synchronize());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return 2.0 * n * static_cast<double>(n) * n * reps / seconds;
}

Status run(const Options& o) {
  std::string why;
  GEOLOCO_RETURN_IF(gpu::device_count(&why) == 0, Err::unsupported, "no CUDA device: ", why);
  auto made_ctx = gpu::Context::create();
  if (!made_ctx.ok()) return made_ctx.status();
  gpu::Context& ctx = **made_ctx;
  auto dev = describe(ctx.device());
  if (!dev.ok()) return dev.status();
  std::printf("geoloco-gpu-bench: %s, sm_%d%d, %d SMs at %.2f GHz; fp32 datasheet peak %.1f TFLOP/s%s\n",
              dev->name.c_str(), dev->major, dev->minor, dev->sms, dev->clock_ghz, dev->fp32_peak() / 1e12,
              o.peak_tflops > 0 ? cat(", given peak ", o.peak_tflops, " TFLOP/s").c_str() : "");

  auto model = Gpt::create(o.gpt);
  if (!model.ok()) return model.status();
  const Gpt& cpu_model = **model;
  const std::size_t params = cpu_model.layout().total();
  const std::size_t tokens_per_step = o.batch * o.gpt.context;
  const double flops_per_step = cpu_model.train_flops(o.batch);
  std::printf(
      "gpt: %zu layers, width %zu, %zu heads, context %zu, vocab %zu: %.1fM parameters; batch %zu = %zu tokens, "
      "%.2f TFLOP per step\n",
      o.gpt.layers, o.gpt.width, o.gpt.heads, o.gpt.context, o.gpt.vocab, params / 1e6, o.batch, tokens_per_step,
      flops_per_step / 1e12);

  std::vector<float> host(params);
  cpu_model.init(host, 1);
  gpu::DeviceBuffer<float> theta, grads;
  GEOLOCO_TRY(theta.assign(host, ctx.stream()));
  GEOLOCO_TRY(grads.allocate(params));
  auto runner = gpu::make_device_model(ctx, cpu_model);
  if (!runner.ok()) return runner.status();
  auto opt = gpu::AdamW::create(ctx, params, cpu::AdamWOptions{}, cpu_model.decay_ranges());
  if (!opt.ok()) return opt.status();
  Batch batch;
  batch.samples = o.batch;
  Rng rng(2);
  batch.tokens.resize(tokens_per_step);
  batch.targets.resize(tokens_per_step);
  for (std::size_t i = 0; i < tokens_per_step; ++i) {
    batch.tokens[i] = static_cast<std::int32_t>(rng.below(o.gpt.vocab));
    batch.targets[i] = static_cast<std::int32_t>(rng.below(o.gpt.vocab));
  }
  GEOLOCO_TRY((*runner)->upload(batch));

  std::vector<bool> modes;
  if (o.tf32 != "on") modes.push_back(false);
  if (o.tf32 != "off") modes.push_back(true);
  for (bool tf32 : modes) {
    ctx.set_tf32(tf32);
    const char* mode = tf32 ? "tf32" : "fp32";
    auto peak = gemm_peak(ctx, o.gemm_size);
    if (!peak.ok()) return peak.status();
    std::printf("[%s] cuBLAS %dx%dx%d gemm: %.1f TFLOP/s (practical peak)\n", mode, o.gemm_size, o.gemm_size,
                o.gemm_size, *peak / 1e12);
    double loss = 0.0;
    const auto step = [&]() -> Status {
      auto l = (*runner)->forward_backward(theta.data(), grads.data());
      if (!l.ok()) return l.status();
      loss = *l;
      return (*opt)->step(ctx, theta.data(), grads.data(), 1e-4);
    };
    for (int i = 0; i < o.warmup; ++i) GEOLOCO_TRY(step());
    GEOLOCO_TRY(ctx.synchronize());
    const auto start = Clock::now();
    for (int i = 0; i < o.steps; ++i) GEOLOCO_TRY(step());
    GEOLOCO_TRY(ctx.synchronize());
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double per_step = seconds / o.steps;
    const double achieved = flops_per_step / per_step;
    const double datasheet = !tf32 ? dev->fp32_peak() : o.peak_tflops * 1e12;
    std::printf("[%s] gpt train step: %.1f ms, %.0f tokens/s, %.1f TFLOP/s model FLOPs, loss %.4f\n", mode,
                per_step * 1e3, tokens_per_step / per_step, achieved / 1e12, loss);
    if (datasheet > 0)
      std::printf("[%s] MFU %.1f%% of the %s peak %.1f TFLOP/s\n", mode, 100.0 * achieved / datasheet,
                  !tf32 ? "fp32 datasheet" : "given", datasheet / 1e12);
    else std::printf("[%s] MFU vs the datasheet: pass --peak-tflops (the TF32 tensor-core peak) to print it\n", mode);
    std::printf("[%s] ratio to the measured cuBLAS gemm: %.1f%%\n", mode, 100.0 * achieved / *peak);
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"geoloco-gpu-bench: gpt training throughput and MFU on one GPU (CUDA backend)"};
  app.add_option("--layers", o.gpt.layers, "transformer blocks")->capture_default_str();
  app.add_option("--width", o.gpt.width, "embedding width")->capture_default_str();
  app.add_option("--heads", o.gpt.heads, "attention heads")->capture_default_str();
  app.add_option("--context", o.gpt.context, "positions per sample")->capture_default_str();
  app.add_option("--batch", o.batch, "samples per step")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--steps", o.steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--gemm-size", o.gemm_size, "n of the n×n×n gemm timed as the practical peak")
      ->capture_default_str()
      ->check(CLI::Range(256, 32768));
  app.add_option("--tf32", o.tf32, "matrix products in fp32, TF32, or both, one after the other")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "on", "both"}));
  app.add_option("--peak-tflops", o.peak_tflops, "datasheet peak for the TF32 MFU line (H200 SXM dense TF32: 494.7)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const Status s = run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "geoloco-gpu-bench: %s\n", s.to_string().c_str());
    return s.code() == Err::unsupported ? 77 : 1;
  }
  return 0;
}
