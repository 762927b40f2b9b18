#include "inner/cpu/bias.h"

namespace geoloco::inner::cpu {

void bias_forward(float* out, const float* b, std::size_t n, std::size_t m) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) out[i * m + j] += b[j];
}

void bias_backward(float* d_b, const float* d_out, std::size_t n, std::size_t m) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) d_b[j] += d_out[i * m + j];
}

}  // namespace geoloco::inner::cpu
