// The outer step on a Δ that arrives in chunks: how geolocod steps a round's
// range as the all-gather's encoded chunks are decoded, so the averaged Δ is
// never whole in memory. Three uses of the same pass: the clip scale (the
// squares summed in chunk order, exchange.h's order), the digest the anchor
// will have after the step (computed on copies of each chunk, so a site can
// COMMIT its digest before it applies anything), and the step itself once
// the round is committed (with the digest after it, in the same pass:
// step_chunks_digest()). Every chunk is stepped with outer_step(),
// elementwise, so the result is bit for bit that of stepping Δ whole. Each
// pass runs on `threads` threads (chunk_pass.h): the chunks are decoded and
// stepped side by side, the digest and the sum of squares taken in order.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "common/status.h"
#include "diloco/chunk_pass.h"
#include "diloco/outer_step.h"

namespace geoloco::diloco {

/// clip_scale() of the whole Δ; 1 without reading Δ when clip_norm <= 0
/// (no clip). Errors: the chunks'.
Result<float> chunked_clip_scale(const ChunkList& delta, double clip_norm, const PassThreads& threads = {});

/// xxh3 of `anchor` as step_chunks() would leave it, the range being the
/// `length` values at `offset`, which the chunks must cover; nothing is
/// changed. Errors: invalid_argument (the range is outside the anchor, the
/// chunks do not cover it), outer_step's, the chunks'.
Result<std::uint64_t> stepped_anchor_digest(std::span<const float> anchor, std::span<const float> momentum,
                                            std::uint64_t offset, std::uint64_t length, const ChunkList& delta,
                                            const OuterOptimizerOptions& options, float scale,
                                            const PassThreads& threads = {});

/// The outer step of the range at `offset`, chunk by chunk, in place.
/// Errors: invalid_argument (the chunks reach outside the anchor: nothing is
/// stepped), outer_step's, the chunks' (then the range is partly stepped).
Status step_chunks(std::span<float> anchor, std::span<float> momentum, std::uint64_t offset, const ChunkList& delta,
                   const OuterOptimizerOptions& options, float scale, const PassThreads& threads = {});
/// step_chunks() of the `length` values at `offset`, which the chunks must
/// cover, and in the same pass the xxh3 of the whole anchor after it (each
/// chunk hashed while it is in cache): what stepped_anchor_digest() said it
/// would be. Errors: as step_chunks(), and invalid_argument for chunks that
/// do not cover the range (nothing is stepped).
Result<std::uint64_t> step_chunks_digest(std::span<float> anchor, std::span<float> momentum, std::uint64_t offset,
                                         std::uint64_t length, const ChunkList& delta,
                                         const OuterOptimizerOptions& options, float scale,
                                         const PassThreads& threads = {});

}  // namespace geoloco::diloco
