// Matrix products of activations with weights, forward and backward, on the
// device: the same four functions and the same meaning as inner/cpu/matmul.h
// (backward ACCUMULATES into every gradient; d_in may be null), through
// cuBLAS. Host code only: the kernels are cuBLAS's.
#pragma once

#include <cstddef>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// out[n,m] = in[n,k] · w[k,m].
Status matmul_forward(Context& ctx, float* out, const float* in, const float* w, std::size_t n, std::size_t k,
                      std::size_t m);
/// d_in[n,k] += d_out · wᵀ (skipped when d_in is null);  d_w[k,m] += inᵀ · d_out.
Status matmul_backward(Context& ctx, float* d_in, float* d_w, const float* d_out, const float* in, const float* w,
                       std::size_t n, std::size_t k, std::size_t m);

/// out[n,m] = in[n,k] · w[m,k]ᵀ (the tied GPT head).
Status matmul_nt_forward(Context& ctx, float* out, const float* in, const float* w, std::size_t n, std::size_t k,
                         std::size_t m);
/// d_in[n,k] += d_out · w;  d_w[m,k] += d_outᵀ · in.
Status matmul_nt_backward(Context& ctx, float* d_in, float* d_w, const float* d_out, const float* in, const float* w,
                          std::size_t n, std::size_t k, std::size_t m);

}  // namespace geoloco::inner::cuda
