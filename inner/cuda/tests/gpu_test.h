// What the CUDA tests share: the device or a visible skip, a Status check,
// NMSE, the small mlp they train, random inputs, copies to and from the
// device, and element-wise comparisons. Header-only, test code only.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>
#include <cstdint>
#include <memory>
#include <string>

#include "inner/cuda/device.h"
#include "inner/rng.h"
#include "inner/train/train_options.h"

namespace geoloco::inner::cuda::testing {

/// The device, or nullptr after a visible skip message: without a GPU (no
/// device, or no driver) every test case WARNs "SKIPPED: no CUDA device"
/// and returns; ctest turns that line into a skipped test
/// (SKIP_REGULAR_EXPRESSION), so CI shows it rather than a pass.
inline std::unique_ptr<Context> gpu_or_skip() {
  std::string why;
  if (device_count(&why) == 0) {
    WARN("SKIPPED: no CUDA device (" << why
                                     << "); the CUDA backend is checked against the CPU reference only "
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

inline std::vector<float> randn(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  inner::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

inline std::vector<std::int32_t> randint(std::size_t n, std::uint64_t seed, std::size_t below) {
  inner::Rng rng(seed);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(rng.below(below));
  return v;
}

template <class T>
DeviceBuffer<T> up(Context& ctx, const std::vector<T>& host) {
  DeviceBuffer<T> d;
  const Status s = d.assign(host, ctx.stream());
  INFO(s.to_string());
  REQUIRE(s.ok());
  return d;
}

template <class T>
std::vector<T> down(Context& ctx, const DeviceBuffer<T>& d) {
  std::vector<T> host(d.size());
  const Status s = d.copy_to(host, ctx.stream());
  INFO(s.to_string());
  REQUIRE(s.ok());
  return host;
}

/// Every element within atol + rtol·|ref|; reports the worst one.
inline void require_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                          double atol, double rtol) {
  REQUIRE(got.size() == ref.size());
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    const double bound = atol + rtol * std::abs(static_cast<double>(ref[i]));
    if (!(err <= bound)) ++bad;
    if (!(err - bound <= worst_excess)) worst_excess = err - bound, worst = i;
  }
  INFO(what << ": " << bad << " of " << ref.size() << " elements outside atol " << atol << " + rtol " << rtol
            << "·|ref|; worst at " << worst << ": got " << got[worst] << ", ref " << ref[worst]);
  REQUIRE(bad == 0);
}

inline void require_equal(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0 && bad++ == 0) first = i;
  INFO(what << ": " << bad << " of " << ref.size() << " elements differ in their bits; first at " << first << ": got "
            << got[first] << ", ref " << ref[first]);
  REQUIRE(bad == 0);
}

}  // namespace geoloco::inner::cuda::testing
