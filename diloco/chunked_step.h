// The outer step on a Δ that arrives in chunks: how geolocod steps a round's
// range as the all-gather's encoded chunks are decoded one at a time, so
// the averaged Δ is never whole in memory. Three uses of the same pass:
// the clip scale (the squares summed in chunk order, exchange.h's order),
// the digest the anchor will have after the step (computed on copies of each
// chunk, so a site can COMMIT its digest before it applies anything), and the
// step itself once the round is committed (with the digest after it, in the
// same pass: step_chunks_digest()). Every chunk is stepped with
// outer_step(), elementwise, so the result is bit for bit that of stepping Δ
// whole.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "common/status.h"
#include "diloco/outer_step.h"

namespace geoloco::diloco {

/// Δ given chunk by chunk, in order: calls `fn(begin, values)` for each
/// chunk, `begin` counted from the start of the round's range; stops at
/// the first error and returns it.
using ChunkFn = std::function<Status(std::uint64_t begin, std::span<const float> values)>;
using ChunkedDelta = std::function<Status(const ChunkFn& fn)>;

/// clip_scale() of the whole Δ; 1 without reading Δ when clip_norm <= 0
/// (no clip). Errors: the chunks'.
Result<float> chunked_clip_scale(const ChunkedDelta& delta, double clip_norm);

/// xxh3 of `anchor` as step_chunks() would leave it, the range being the
/// `length` values at `offset`; nothing is changed. Errors: invalid_argument
/// (the range is outside the anchor), outer_step's, the chunks'.
Result<std::uint64_t> stepped_anchor_digest(std::span<const float> anchor, std::span<const float> momentum,
                                            std::uint64_t offset, std::uint64_t length, const ChunkedDelta& delta,
                                            const OuterOptimizerOptions& options, float scale);

/// The outer step of the range at `offset`, chunk by chunk, in place.
/// Errors: invalid_argument (a chunk outside the anchor), outer_step's, the
/// chunks' (the chunks before the failing one are stepped).
Status step_chunks(std::span<float> anchor, std::span<float> momentum, std::uint64_t offset, const ChunkedDelta& delta,
                   const OuterOptimizerOptions& options, float scale);
/// step_chunks() of the `length` values at `offset`, and in the same pass
/// the xxh3 of the whole anchor after it (each chunk hashed while it is in
/// cache): what stepped_anchor_digest() said it would be. The chunks must
/// come in order and cover the range. Errors: as step_chunks(), and
/// invalid_argument for a chunk out of order or a range not covered (the
/// chunks before are stepped).
Result<std::uint64_t> step_chunks_digest(std::span<float> anchor, std::span<float> momentum, std::uint64_t offset,
                                         std::uint64_t length, const ChunkedDelta& delta,
                                         const OuterOptimizerOptions& options, float scale);

}  // namespace geoloco::diloco
