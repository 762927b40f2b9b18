// Elementwise activations, forward and backward: GELU (the tanh
// approximation GPT-2 uses) and ReLU (the MLP's).
#pragma once

#include <cstddef>

namespace geoloco::inner::cpu {

/// out = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
void gelu_forward(float* out, const float* in, std::size_t n);
/// d_in += d_out · gelu'(in).
void gelu_backward(float* d_in, const float* d_out, const float* in, std::size_t n);

/// out = max(x, 0).
void relu_forward(float* out, const float* in, std::size_t n);
/// d_in += d_out where in > 0 (the subgradient 0 at exactly 0).
void relu_backward(float* d_in, const float* d_out, const float* in, std::size_t n);

}  // namespace geoloco::inner::cpu
