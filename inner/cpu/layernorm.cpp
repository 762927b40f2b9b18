#include "inner/cpu/layernorm.h"

#include <cmath>

namespace geoloco::inner::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* w, const float* b,
                       std::size_t n, std::size_t c) {
  for (std::size_t i = 0; i < n; ++i) {
    const float* x = in + i * c;
    float m = 0.0f;
    for (std::size_t j = 0; j < c; ++j) m += x[j];
    m /= static_cast<float>(c);
    float v = 0.0f;  // two passes: var from (x − mean)², not E[x²] − mean², which cancels badly
    for (std::size_t j = 0; j < c; ++j) v += (x[j] - m) * (x[j] - m);
    v /= static_cast<float>(c);
    const float s = 1.0f / std::sqrt(v + kLayerNormEpsilon);
    float* y = out + i * c;
    for (std::size_t j = 0; j < c; ++j) y[j] = (x[j] - m) * s * w[j] + b[j];
    mean[i] = m;
    rstd[i] = s;
  }
}

void layernorm_backward(float* d_in, float* d_w, float* d_b, const float* d_out, const float* in, const float* w,
                        const float* mean, const float* rstd, std::size_t n, std::size_t c) {
  for (std::size_t i = 0; i < n; ++i) {
    const float* x = in + i * c;
    const float* dy = d_out + i * c;
    float* dx = d_in + i * c;
    // With x̂ = (x − mean)·rstd and g = dy·w:
    //   dx = rstd · (g − mean(g) − x̂ · mean(g · x̂))
    float g_mean = 0.0f;
    float gx_mean = 0.0f;
    for (std::size_t j = 0; j < c; ++j) {
      const float xhat = (x[j] - mean[i]) * rstd[i];
      const float g = dy[j] * w[j];
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean /= static_cast<float>(c);
    gx_mean /= static_cast<float>(c);
    for (std::size_t j = 0; j < c; ++j) {
      const float xhat = (x[j] - mean[i]) * rstd[i];
      const float g = dy[j] * w[j];
      d_b[j] += dy[j];
      d_w[j] += dy[j] * xhat;
      dx[j] += rstd[i] * (g - g_mean - xhat * gx_mean);
    }
  }
}

}  // namespace geoloco::inner::cpu
