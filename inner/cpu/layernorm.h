// Layer normalization over the last dimension (Ba et al.), forward and
// backward:  y = (x − mean) · rstd · w + b,  rstd = 1 / sqrt(var + 1e-5),
// with the biased variance, as GPT-2 and PyTorch compute it.
#pragma once

#include <cstddef>

namespace geoloco::inner::cpu {

inline constexpr float kLayerNormEpsilon = 1e-5f;

/// out[n,c]; saves mean[n] and rstd[n] for the backward pass.
void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* w, const float* b,
                       std::size_t n, std::size_t c);
/// Accumulates d_in[n,c], d_w[c], d_b[c].
void layernorm_backward(float* d_in, float* d_w, float* d_b, const float* d_out, const float* in, const float* w,
                        const float* mean, const float* rstd, std::size_t n, std::size_t c);

}  // namespace geoloco::inner::cpu
