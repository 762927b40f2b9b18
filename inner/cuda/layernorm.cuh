// Layer normalization over the last dimension, on the device, mirroring
// inner/cpu/layernorm.h (same epsilon, biased variance, two-pass variance;
// backward ACCUMULATES into d_in, d_w, d_b).
//
// One warp per row: a row of a few hundred to a few thousand floats is read
// by 32 lanes with coalesced loads and reduced with shuffles, no shared
// memory. d_w and d_b are column sums over rows (detail::column_sum).
#pragma once

#include <cstddef>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// out[n,c]; saves mean[n] and rstd[n] for the backward pass.
Status layernorm_forward(Context& ctx, float* out, float* mean, float* rstd, const float* in, const float* w,
                         const float* b, std::size_t n, std::size_t c);
/// Accumulates d_in[n,c], d_w[c], d_b[c].
Status layernorm_backward(Context& ctx, float* d_in, float* d_w, float* d_b, const float* d_out, const float* in,
                          const float* w, const float* mean, const float* rstd, std::size_t n, std::size_t c);

}  // namespace geoloco::inner::cuda
