// Causal multi-head self-attention, forward and backward.
//
// Input is the fused projection qkv[b,t,3c] = (q | k | v), each c wide and
// split into `heads` heads of c/heads. Per batch element and head:
//   att = softmax_causal(q·kᵀ / √hs)   [t,t], row i sees keys 0..i
//   out = att · v                      [t,hs], written to out[b,t,h·hs ..]
// The products run through sgemm on strided views of qkv (no copies); the
// masked softmax is a plain loop. att is kept for the backward pass.
#pragma once

#include <cstddef>

namespace geoloco::inner::cpu {

/// out[b,t,c]; att[b,heads,t,t] (probabilities, 0 above the diagonal).
void attention_forward(float* out, float* att, const float* qkv, std::size_t batch, std::size_t t, std::size_t c,
                       std::size_t heads);
/// Accumulates d_qkv[b,t,3c]. `scratch` holds t·t floats.
void attention_backward(float* d_qkv, float* scratch, const float* d_out, const float* qkv, const float* att,
                        std::size_t batch, std::size_t t, std::size_t c, std::size_t heads);

}  // namespace geoloco::inner::cpu
