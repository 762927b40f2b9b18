// Adding a bias vector to every row, on the device, mirroring
// inner/cpu/bias.h. The backward pass is a column sum over rows; it runs in
// a fixed order (detail::column_sum), not the CPU's row order, so it agrees
// with the reference to rounding, not to the bit.
#pragma once

#include <cstddef>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// out[n,m] += b[m] for every row.
Status bias_forward(Context& ctx, float* out, const float* b, std::size_t n, std::size_t m);
/// d_b[m] += Σ_rows d_out[row, m].
Status bias_backward(Context& ctx, float* d_b, const float* d_out, std::size_t n, std::size_t m);

}  // namespace geoloco::inner::cuda
