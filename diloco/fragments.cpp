#include "diloco/fragments.h"

#include <algorithm>

namespace geoloco::diloco {

Status StreamingOptions::validate(std::uint64_t inner_steps) const {
  GEOLOCO_RETURN_IF(fragments < 1, Err::invalid_argument, "streaming.fragments must be at least 1, got ", fragments);
  GEOLOCO_RETURN_IF(inner_steps < 1, Err::invalid_argument, "inner.steps (H) must be at least 1, got ", inner_steps);
  GEOLOCO_RETURN_IF(overlap_steps >= inner_steps, Err::invalid_argument, "streaming.overlap (", overlap_steps,
                    ") must be smaller than inner.steps H (", inner_steps,
                    "): a fragment's exchange has to finish before its next sync");
  GEOLOCO_RETURN_IF(!(alpha >= 0.0 && alpha <= 1.0), Err::invalid_argument, "streaming.alpha must be in [0, 1], got ",
                    alpha);
  GEOLOCO_RETURN_IF(delayed && alpha > 0.0, Err::invalid_argument,
                    "streaming.alpha weighs a merge that replaces the local values; merge: delayed keeps the local "
                    "progress instead, so leave alpha out");
  return {};
}

Result<std::vector<Fragment>> cut_fragments(std::span<const std::uint64_t> sizes, std::uint32_t count) {
  GEOLOCO_RETURN_IF(count == 0 || count > sizes.size(), Err::invalid_argument, "cannot cut ", sizes.size(),
                    " tensors into ", count, " fragments: fragments never cut a tensor, so each needs at least one");
  std::uint64_t total = 0;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    GEOLOCO_RETURN_IF(sizes[t] == 0, Err::invalid_argument, "tensor ", t, " holds no values");
    total += sizes[t];
  }
  std::vector<Fragment> out;
  std::size_t t = 0;
  std::uint64_t offset = 0;
  for (std::uint32_t k = 0; k < count; ++k) {
    Fragment f;
    f.index = k;
    f.first_tensor = static_cast<std::uint32_t>(t);
    f.offset = offset;
    // Fragment k's target end, (k+1)/count of the values without overflow;
    // the last one takes everything left.
    const std::uint64_t target = total / count * (k + 1) + total % count * (k + 1) / count;
    const std::size_t must_leave = count - k - 1;  // tensors the later fragments need
    do {
      f.length += sizes[t];
      ++t;
    } while (t < sizes.size() - must_leave && (offset + f.length < target || k + 1 == count));
    f.tensor_count = static_cast<std::uint32_t>(t - f.first_tensor);
    offset += f.length;
    out.push_back(f);
  }
  return out;
}

std::uint32_t fragment_of_round(std::uint64_t k, std::uint32_t fragments) {
  return fragments <= 1 ? 0 : static_cast<std::uint32_t>(k % fragments);
}

std::uint64_t next_round_of_fragment(std::uint32_t fragment, std::uint64_t from, std::uint32_t fragments) {
  if (fragments <= 1) return from;
  const std::uint64_t have = from % fragments;
  return from + (fragment + fragments - have) % fragments;
}

std::uint64_t delayed_overlap(std::uint64_t inner_steps, std::uint32_t fragments) {
  if (fragments > 1) return inner_steps / fragments;
  return inner_steps > 0 ? inner_steps - 1 : 0;
}

std::uint64_t steps_through_round(std::uint64_t k, std::uint32_t fragments, std::uint64_t inner_steps) {
  if (k == 0) return 0;
  const std::uint64_t f = fragments == 0 ? 1 : fragments;
  return (k - 1) / f * inner_steps + ((k - 1) % f + 1) * inner_steps / f;
}

std::uint64_t phase_steps(std::uint64_t round, std::uint64_t first_round, std::uint32_t fragments,
                          std::uint64_t inner_steps) {
  const std::uint64_t k = round >= first_round ? round - first_round + 1 : 1;
  return steps_through_round(k, fragments, inner_steps) - steps_through_round(k - 1, fragments, inner_steps);
}

Status merge_fragment(std::span<float> local, std::span<const float> global, double alpha) {
  GEOLOCO_RETURN_IF(local.size() != global.size(), Err::invalid_argument, "merge: local fragment has ", local.size(),
                    " values, global has ", global.size());
  GEOLOCO_RETURN_IF(!(alpha >= 0.0 && alpha <= 1.0), Err::invalid_argument, "merge: alpha must be in [0, 1], got ",
                    alpha);
  if (alpha == 0.0) {  // plain DiLoCo: the replica restarts from the anchor, bit for bit (even over NaN)
    std::copy(global.begin(), global.end(), local.begin());
    return {};
  }
  for (std::size_t i = 0; i < local.size(); ++i)
    local[i] =
        static_cast<float>(alpha * static_cast<double>(local[i]) + (1.0 - alpha) * static_cast<double>(global[i]));
  return {};
}

Status merge_fragment_delayed(std::span<float> local, std::span<const float> global, std::span<const float> at_sync) {
  GEOLOCO_RETURN_IF(local.size() != global.size() || local.size() != at_sync.size(), Err::invalid_argument,
                    "delayed merge: local fragment has ", local.size(), " values, global ", global.size(),
                    ", the copy taken at the sync ", at_sync.size());
  for (std::size_t i = 0; i < local.size(); ++i) {
    const double progress = static_cast<double>(local[i]) - static_cast<double>(at_sync[i]);
    local[i] = static_cast<float>(static_cast<double>(global[i]) + progress);
  }
  return {};
}

}  // namespace geoloco::diloco
