// What the CUDA tests share: the device or a visible skip, a Status check,
// and NMSE. Header-only, test code only.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <memory>
#include <string>

#include "inner/cuda/device.h"

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
