#include "diloco/chunked_step.h"

#include <cmath>
#include <optional>
#include <vector>

#include "common/digest.h"

namespace geoloco::diloco {

namespace {
// The chunks cover the `length` values at `offset` of an anchor of `n`
// (any length when none is given); returns the values they cover.
Result<std::uint64_t> check_cover(const ChunkList& delta, std::uint64_t n, std::uint64_t momentum, std::uint64_t offset,
                                  std::optional<std::uint64_t> length) {
  GEOLOCO_RETURN_IF(momentum != n, Err::invalid_argument, "the momentum has ", momentum, " values, the anchor ", n);
  auto covered = delta.covered();
  if (!covered.ok()) return covered.status();
  const std::uint64_t range = length.value_or(*covered);
  GEOLOCO_RETURN_IF(offset > n || range > n - offset, Err::invalid_argument, "the round's values [", offset, ", ",
                    offset + range, ") lie outside the anchor's ", n);
  GEOLOCO_RETURN_IF(*covered != range, Err::invalid_argument, "the chunks of Δ end at ", *covered, " of the round's ",
                    range, " values");
  return *covered;
}
}  // namespace

Result<float> chunked_clip_scale(const ChunkList& delta, double clip_norm, const PassThreads& threads) {
  // Without a clip the scale is 1 whatever the norm (clip_scale()): no pass over Δ.
  if (clip_norm <= 0.0) return 1.0f;
  double squares = 0;
  GEOLOCO_TRY(run_chunk_pass(delta, threads, {}, [&](std::size_t, std::uint64_t, std::span<const float> values) {
    squares = add_squares(squares, values);
    return Status();
  }));
  return clip_scale(std::sqrt(squares), clip_norm);
}

Result<std::uint64_t> stepped_anchor_digest(std::span<const float> all, std::span<const float> momentum,
                                            std::uint64_t offset, std::uint64_t length, const ChunkList& delta,
                                            const OuterOptimizerOptions& options, float scale,
                                            const PassThreads& threads) {
  GEOLOCO_TRY(check_cover(delta, all.size(), momentum.size(), offset, length).status());
  // The values before and after the range as they are; the range stepped
  // piece by piece on copies.
  StreamingDigest digest;
  digest.update(all.first(offset));
  GEOLOCO_TRY(run_chunk_pass(
      delta, threads,
      [&](std::size_t, std::uint64_t begin, std::span<float> d,
          std::vector<float>& a) -> Result<std::span<const float>> {
        const std::uint64_t from = offset + begin;
        a.resize(d.size());
        GEOLOCO_TRY(
            outer_stepped_anchor(all.subspan(from, d.size()), momentum.subspan(from, d.size()), d, options, scale, a));
        return std::span<const float>(a);
      },
      [&](std::size_t, std::uint64_t, std::span<const float> stepped) {
        digest.update(stepped);
        return Status();
      }));
  digest.update(all.subspan(offset + length));
  return digest.value();
}

Status step_chunks(std::span<float> anchor, std::span<float> momentum, std::uint64_t offset, const ChunkList& delta,
                   const OuterOptimizerOptions& options, float scale, const PassThreads& threads) {
  GEOLOCO_TRY(check_cover(delta, anchor.size(), momentum.size(), offset, std::nullopt).status());
  return run_chunk_pass(
      delta, threads,
      [&](std::size_t, std::uint64_t begin, std::span<float> d, std::vector<float>&) -> Result<std::span<const float>> {
        const std::uint64_t from = offset + begin;
        GEOLOCO_TRY(outer_step(anchor.subspan(from, d.size()), momentum.subspan(from, d.size()), d, options, scale));
        return std::span<const float>();
      },
      {});
}

Result<std::uint64_t> step_chunks_digest(std::span<float> anchor, std::span<float> momentum, std::uint64_t offset,
                                         std::uint64_t length, const ChunkList& delta,
                                         const OuterOptimizerOptions& options, float scale,
                                         const PassThreads& threads) {
  GEOLOCO_TRY(check_cover(delta, anchor.size(), momentum.size(), offset, length).status());
  StreamingDigest digest;
  digest.update(std::span<const float>(anchor.first(offset)));
  GEOLOCO_TRY(run_chunk_pass(
      delta, threads,
      [&](std::size_t, std::uint64_t begin, std::span<float> d, std::vector<float>&) -> Result<std::span<const float>> {
        const auto a = anchor.subspan(offset + begin, d.size());
        GEOLOCO_TRY(outer_step(a, momentum.subspan(offset + begin, d.size()), d, options, scale));
        return std::span<const float>(a);
      },
      [&](std::size_t, std::uint64_t, std::span<const float> stepped) {
        digest.update(stepped);
        return Status();
      }));
  digest.update(std::span<const float>(anchor.subspan(offset + length)));
  return digest.value();
}

}  // namespace geoloco::diloco
