// Causal multi-head self-attention on the device, mirroring
// inner/cpu/attention.h: the same fused input qkv[b,t,3c], the same saved
// probabilities att[b,heads,t,t] (0 above the diagonal), and a backward pass
// that ACCUMULATES into d_qkv.
//
// How (llm.c's layout): q, k and v are first copied into head-major scratch
// [b,heads,t,hs], so each of the B·heads products is a contiguous matrix and
// ONE strided-batched cuBLAS call does them all; the CPU reference instead
// loops over (b, head) with strided views. The masked softmax is one warp
// per row. The output is copied back to [b,t,c]. Scratch comes from the
// Context (4·b·t·c floats forward; 7·b·t·c + b·heads·t·t backward).
#pragma once

#include <cstddef>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// out[b,t,c]; att[b,heads,t,t].
Status attention_forward(Context& ctx, float* out, float* att, const float* qkv, std::size_t batch, std::size_t t,
                         std::size_t c, std::size_t heads);
/// Accumulates d_qkv[b,t,3c].
Status attention_backward(Context& ctx, float* d_qkv, const float* d_out, const float* qkv, const float* att,
                          std::size_t batch, std::size_t t, std::size_t c, std::size_t heads);

}  // namespace geoloco::inner::cuda
