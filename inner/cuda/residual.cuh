// The residual stream's addition, on the device: out = a + b elementwise (the
// GPT's residual2 = residual + attention branch, residual3 = residual2 + MLP
// branch, as inner/models/gpt.cpp writes them in loops). It has no backward
// op: the gradient of a sum passes to both operands unchanged, which the
// model expresses by handing the same d_residual to both branches.
#pragma once

#include <cstddef>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// out[i] = a[i] + b[i] for i < n (out may alias a or b).
Status residual_forward(Context& ctx, float* out, const float* a, const float* b, std::size_t n);

}  // namespace geoloco::inner::cuda
