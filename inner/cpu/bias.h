// Adding a bias vector to every row, forward and backward.
#pragma once

#include <cstddef>

namespace geoloco::inner::cpu {

/// out[n,m] += b[m] for every row.
void bias_forward(float* out, const float* b, std::size_t n, std::size_t m);
/// d_b[m] += Σ_rows d_out[row, m], rows summed in order 0..n-1.
void bias_backward(float* d_b, const float* d_out, std::size_t n, std::size_t m);

}  // namespace geoloco::inner::cpu
