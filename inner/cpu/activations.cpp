#include "inner/cpu/activations.h"

#include <cmath>

namespace geoloco::inner::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(float* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(u));
  }
}

void gelu_backward(float* d_in, const float* d_out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float t = std::tanh(u);
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 − tanh² u) u'
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    d_in[i] += d_out[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
}

void relu_forward(float* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(float* d_in, const float* d_out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (in[i] > 0.0f) d_in[i] += d_out[i];
}

}  // namespace geoloco::inner::cpu
