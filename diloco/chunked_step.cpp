#include "diloco/chunked_step.h"

#include <cmath>
#include <vector>

#include "common/digest.h"

namespace geoloco::diloco {

Result<float> chunked_clip_scale(const ChunkedDelta& delta, double clip_norm) {
  // Without a clip the scale is 1 whatever the norm (clip_scale()): no pass over Δ.
  if (clip_norm <= 0.0) return 1.0f;
  double squares = 0;
  GEOLOCO_TRY(delta([&](std::uint64_t, std::span<const float> values) {
    squares = add_squares(squares, values);
    return Status();
  }));
  return clip_scale(std::sqrt(squares), clip_norm);
}

Result<std::uint64_t> stepped_anchor_digest(std::span<const float> all, std::span<const float> momentum,
                                            std::uint64_t at, std::uint64_t n, const ChunkedDelta& delta,
                                            const OuterOptimizerOptions& options, float scale) {
  GEOLOCO_RETURN_IF(momentum.size() != all.size(), Err::invalid_argument, "the momentum has ", momentum.size(),
                    " values, the anchor ", all.size());
  GEOLOCO_RETURN_IF(at + n > all.size(), Err::invalid_argument, "the round's values [", at, ", ", at + n,
                    ") lie outside the anchor's ", all.size());
  // The values before and after the range as they are; the range stepped
  // piece by piece on copies.
  StreamingDigest digest;
  digest.update(all.first(at));
  std::vector<float> a;
  GEOLOCO_TRY(delta([&](std::uint64_t begin, std::span<const float> d) -> Status {
    GEOLOCO_RETURN_IF(begin + d.size() > n, Err::invalid_argument, "a chunk of Δ ends at ", begin + d.size(),
                      ", past the round's ", n, " values");
    const std::uint64_t from = at + begin;
    a.resize(d.size());
    GEOLOCO_TRY(
        outer_stepped_anchor(all.subspan(from, d.size()), momentum.subspan(from, d.size()), d, options, scale, a));
    digest.update(std::span<const float>(a));
    return Status();
  }));
  digest.update(all.subspan(at + n));
  return digest.value();
}

Status step_chunks(std::span<float> anchor, std::span<float> momentum, std::uint64_t offset, const ChunkedDelta& delta,
                   const OuterOptimizerOptions& options, float scale) {
  return delta([&](std::uint64_t begin, std::span<const float> d) -> Status {
    const std::uint64_t from = offset + begin;
    GEOLOCO_RETURN_IF(offset > anchor.size() || begin > anchor.size() - offset || d.size() > anchor.size() - from ||
                          momentum.size() != anchor.size(),
                      Err::invalid_argument, "a chunk of Δ at ", from, " lies outside the anchor's ", anchor.size(),
                      " values");
    return outer_step(anchor.subspan(from, d.size()), momentum.subspan(from, d.size()), d, options, scale);
  });
}

Result<std::uint64_t> step_chunks_digest(std::span<float> anchor, std::span<float> momentum, std::uint64_t offset,
                                         std::uint64_t length, const ChunkedDelta& delta,
                                         const OuterOptimizerOptions& options, float scale) {
  GEOLOCO_RETURN_IF(momentum.size() != anchor.size(), Err::invalid_argument, "the momentum has ", momentum.size(),
                    " values, the anchor ", anchor.size());
  GEOLOCO_RETURN_IF(offset > anchor.size() || length > anchor.size() - offset, Err::invalid_argument,
                    "the round's values [", offset, ", ", offset + length, ") lie outside the anchor's ",
                    anchor.size());
  StreamingDigest digest;
  digest.update(std::span<const float>(anchor.first(offset)));
  std::uint64_t next = 0;
  GEOLOCO_TRY(delta([&](std::uint64_t begin, std::span<const float> d) -> Status {
    GEOLOCO_RETURN_IF(begin != next || d.size() > length - begin, Err::invalid_argument, "a chunk of Δ at ", begin,
                      " of ", d.size(), " values, where the step expects the values from ", next, " of ", length);
    const auto a = anchor.subspan(offset + begin, d.size());
    GEOLOCO_TRY(outer_step(a, momentum.subspan(offset + begin, d.size()), d, options, scale));
    digest.update(std::span<const float>(a));
    next = begin + d.size();
    return Status();
  }));
  GEOLOCO_RETURN_IF(next != length, Err::invalid_argument, "the chunks of Δ end at ", next, " of the round's ", length,
                    " values");
  digest.update(std::span<const float>(anchor.subspan(offset + length)));
  return digest.value();
}

}  // namespace geoloco::diloco
