// Global gradient-norm clipping on the device, mirroring inner/optim/clip.h,
// and the in-place scaling the device trainer also averages its gradient
// with (the CPU Trainer's `g *= 1/parts` loop).
//
// The norm squares and sums in double, as the reference does, but in a
// fixed two-level tree (blocks, then one block over their partial sums)
// instead of index order: the two sums differ by ~1e-16 relative, far below
// what the fp32 clip factor can see in all but a last-ulp tie. The order
// depends only on n, so every rank of a data-parallel group, holding the
// same all-reduced gradient, computes the same norm bits and takes the same
// clipping decision. No atomics.
#pragma once

#include <cstddef>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// ‖g‖₂ of n device floats (waits for the stream: the value comes back to
/// the host). Uses ctx.scratch(). Errors: io.
Result<double> global_norm(Context& ctx, const float* grads, std::size_t n);

/// Clips in place when ‖g‖₂ > max_norm (max_norm <= 0: never) and returns
/// the norm before clipping. Errors: non_finite (NaN or Inf norm: nothing
/// is scaled), io.
Result<double> clip_global_norm(Context& ctx, float* grads, std::size_t n, double max_norm);

/// data[i] *= factor for i < n, in fp32 (one rounding, as the reference loop).
Status scale(Context& ctx, float* data, std::size_t n, float factor);

}  // namespace geoloco::inner::cuda
