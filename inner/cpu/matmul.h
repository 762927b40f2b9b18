// Matrix products of activations with weights, forward and backward.
//
// Shapes are row-major. Backward functions ACCUMULATE (+=) into every
// gradient they produce, llm.c style: a weight used twice (the GPT's tied
// embedding) and a residual stream both need sums, and callers zero the
// gradient buffers once per step.
#pragma once

#include <cstddef>

namespace geoloco::inner::cpu {

/// out[n,m] = in[n,k] · w[k,m]   (w stored input-major, as x·W).
void matmul_forward(float* out, const float* in, const float* w, std::size_t n, std::size_t k, std::size_t m);
/// d_in[n,k] += d_out · wᵀ;  d_w[k,m] += inᵀ · d_out.
void matmul_backward(float* d_in, float* d_w, const float* d_out, const float* in, const float* w, std::size_t n,
                     std::size_t k, std::size_t m);

/// out[n,m] = in[n,k] · w[m,k]ᵀ   (w stored output-major: the tied GPT head
/// reuses the token embedding [vocab, width] as its weight).
void matmul_nt_forward(float* out, const float* in, const float* w, std::size_t n, std::size_t k, std::size_t m);
/// d_in[n,k] += d_out · w;  d_w[m,k] += d_outᵀ · in.
void matmul_nt_backward(float* d_in, float* d_w, const float* d_out, const float* in, const float* w, std::size_t n,
                        std::size_t k, std::size_t m);

}  // namespace geoloco::inner::cpu
