// Token + learned position embedding, forward and backward:
//   out[b,i,:] = wte[tokens[b,i], :] + wpe[i, :]
// Token ids must already be checked to lie in [0, vocab).
#pragma once

#include <cstddef>
#include <cstdint>

namespace geoloco::inner::cpu {

void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::size_t batch,
                       std::size_t t, std::size_t c);
/// Accumulates d_wte and d_wpe, visiting (b, i) in order so repeated tokens
/// sum in a fixed order.
void embedding_backward(float* d_wte, float* d_wpe, const float* d_out, const std::int32_t* tokens, std::size_t batch,
                        std::size_t t, std::size_t c);

}  // namespace geoloco::inner::cpu
