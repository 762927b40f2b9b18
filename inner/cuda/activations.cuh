// Elementwise activations on the device, mirroring inner/cpu/activations.h:
// GELU (tanh approximation) and ReLU, forward and backward (backward
// ACCUMULATES into d_in). Device pointers; work is queued on ctx.stream().
#pragma once

#include <cstddef>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// out = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
Status gelu_forward(Context& ctx, float* out, const float* in, std::size_t n);
/// d_in += d_out · gelu'(in).
Status gelu_backward(Context& ctx, float* d_in, const float* d_out, const float* in, std::size_t n);
/// out = max(x, 0).
Status relu_forward(Context& ctx, float* out, const float* in, std::size_t n);
/// d_in += d_out where in > 0.
Status relu_backward(Context& ctx, float* d_in, const float* d_out, const float* in, std::size_t n);

}  // namespace geoloco::inner::cuda
