// Token + learned position embedding on the device, mirroring
// inner/cpu/embedding.h:  out[b,i,:] = wte[tokens[b,i], :] + wpe[i, :].
//
// The backward pass scatters into the rows of d_wte that the batch's tokens
// name; a token repeated in the batch adds several rows into one. Instead of
// floating-point atomics (whose order changes run to run) the caller passes a
// TokenIndex: the positions of each token id, in increasing position order,
// built on the host where the batch comes from. One thread per (token id,
// column) then adds its rows in exactly the reference's (b, i) order, so
// d_wte and d_wpe come out bit for bit as the CPU computes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// The positions of each token id (CSR): positions[offsets[v] .. offsets[v+1])
/// are the flat (b·t + i) indices holding token v, increasing.
struct TokenIndex {
  std::vector<std::int32_t> offsets;    ///< vocab + 1 entries
  std::vector<std::int32_t> positions;  ///< one per token of the batch
};

/// Counting sort of `tokens` (each in [0, vocab), checked by the caller).
TokenIndex build_token_index(std::span<const std::int32_t> tokens, std::size_t vocab);

Status embedding_forward(Context& ctx, float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                         std::size_t batch, std::size_t t, std::size_t c);
/// Accumulates d_wte[vocab, c] and d_wpe[t, c]. `offsets` and `positions` are
/// a TokenIndex of this batch's tokens, in device memory.
Status embedding_backward(Context& ctx, float* d_wte, float* d_wpe, const float* d_out, const std::int32_t* offsets,
                          const std::int32_t* positions, std::size_t vocab, std::size_t batch, std::size_t t,
                          std::size_t c);

}  // namespace geoloco::inner::cuda
