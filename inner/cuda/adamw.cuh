// AdamW on the device, mirroring inner/cpu/adamw.h: the same options struct,
// the same order of operations, β^t kept on the host by repeated
// multiplication in double and passed in as fp32 constants, weight decay
// only on the caller's ranges.
//
// The kernel is written operation for operation as the reference loop and
// the library is compiled with --fmad=false (no fused multiply-add), with
// IEEE division and square root (nvcc's defaults without fast-math), so each
// update is the SAME BITS as cpu::AdamW given the same gradients: the backend
// test checks equality, not a tolerance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "inner/cpu/adamw.h"
#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

class AdamW {
 public:
  /// Device state (m, v zeroed, the decay mask) for `parameters` values.
  /// Errors: invalid_argument (options, a range past the end), io.
  static Result<std::unique_ptr<AdamW>> create(Context& ctx, std::size_t parameters, cpu::AdamWOptions options,
                                               std::vector<std::pair<std::size_t, std::size_t>> decay_ranges = {});

  /// One update of device `params` with device `grads` (both parameters()
  /// values), learning rate `lr`, queued on ctx.stream().
  /// Errors: invalid_argument (lr), io.
  Status step(Context& ctx, float* params, const float* grads, double lr);

  std::size_t parameters() const { return m_.size(); }
  std::uint64_t steps() const { return t_; }
  /// Copies the moments to the host (tests compare them with the reference;
  /// the device trainer saves them with the inner state).
  Status download_moments(Context& ctx, std::span<float> m, std::span<float> v) const;

  /// Takes over the state of an AdamW of the same size that took `steps`
  /// updates and held moments `m` and `v` (host memory), as
  /// cpu::AdamW::restore: β^t is rebuilt by the same repeated multiplication,
  /// so the next step() computes the bits it would have. Returns once the
  /// moments are on the device. Errors: invalid_argument (sizes), io.
  Status restore(Context& ctx, std::span<const float> m, std::span<const float> v, std::uint64_t steps);

 private:
  explicit AdamW(cpu::AdamWOptions options) : options_(options) {}

  cpu::AdamWOptions options_;
  DeviceBuffer<float> m_;
  DeviceBuffer<float> v_;
  DeviceBuffer<std::uint8_t> decay_;  // 1 where weight decay applies
  std::uint64_t t_ = 0;
  double beta1_t_ = 1.0;
  double beta2_t_ = 1.0;
};

}  // namespace geoloco::inner::cuda
