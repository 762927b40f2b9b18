// What the CUDA tests share: the device or a visible skip, a Status check,
// NMSE, and the small mlp they train. Header-only, test code only.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "inner/cuda/device.h"
#include "inner/train/train_options.h"

namespace geoloco::inner::cuda::testing {

/// The device, or nullptr after a visible skip message: without a GPU (no
/// device, or no driver) every test case WARNs "SKIPPED: no CUDA device"
/// and returns; ctest turns that line into a skipped test
/// (SKIP_REGULAR_EXPRESSION), so CI shows it rather than a pass.
inline std::unique_ptr<Context> gpu_or_skip() {
  std::string why;
  if (device_count(&why) == 0) {
    WARN("SKIPPED: no CUDA device (" << why << "); the CUDA backend is checked against the CPU reference only "
                                             "where a GPU is (scripts/gpu-check.sh)");
    return nullptr;
  }
  auto ctx = Context::create();
  INFO(ctx.status().to_string());
  REQUIRE(ctx.ok());
  return std::move(*ctx);
}

inline void ok(const Status& s) {
  INFO(s.to_string());
  REQUIRE(s.ok());
}

inline constexpr std::uint64_t kMlpSteps = 6;

/// The mlp of the synthetic 4×4 images that the device trainer tests train:
/// kMlpSteps steps of batch 16 in 2 micro-batches, and a clip norm far
/// below any gradient norm of an untrained network, so every step clips
/// (the device's norm and scaling both run).
inline TrainOptions small_mlp_options() {
  TrainOptions o;
  o.model = "mlp";
  o.mlp.inputs = 16;  // the synthetic 4×4 images
  o.mlp.hidden = {32, 24};
  o.mlp.classes = 10;
  o.batch = 16;
  o.micro_batches = 2;
  o.steps = kMlpSteps;
  o.schedule = ScheduleOptions{1e-3, 2, kMlpSteps, 0.1};
  o.clip_norm = 1e-3;
  o.eval_batch = 50;  // 128 evaluation images: chunks of 50, 50, 28
  o.seed = 5;
  return o;
}

/// Σ(got − ref)² / Σref² (Σ(got − ref)² when ref is all zero).
inline double nmse(const float* got, const float* ref, std::size_t n) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0.0 ? num / den : num;
}

}  // namespace geoloco::inner::cuda::testing
