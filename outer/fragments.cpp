#include "outer/fragments.h"

#include <algorithm>

namespace geoloco::outer {

Status StreamingOptions::validate(std::uint64_t inner_steps) const {
  GEOLOCO_RETURN_IF(fragments < 1, Err::invalid_argument, "streaming.fragments must be at least 1, got ", fragments);
  GEOLOCO_RETURN_IF(inner_steps < 1, Err::invalid_argument, "inner.steps (H) must be at least 1, got ", inner_steps);
  GEOLOCO_RETURN_IF(overlap_steps >= inner_steps, Err::invalid_argument, "streaming.overlap (", overlap_steps,
                    ") must be smaller than inner.steps H (", inner_steps,
                    "): a fragment's exchange has to finish before its next sync");
  GEOLOCO_RETURN_IF(!(alpha >= 0.0 && alpha <= 1.0), Err::invalid_argument, "streaming.alpha must be in [0, 1], got ",
                    alpha);
  return {};
}

Result<std::vector<Fragment>> partition_fragments(const std::vector<TensorInfo>& layout, std::uint32_t count) {
  GEOLOCO_TRY(validate_layout(layout));
  GEOLOCO_RETURN_IF(count < 1, Err::invalid_argument, "streaming.fragments must be at least 1");
  GEOLOCO_RETURN_IF(count > layout.size(), Err::invalid_argument, "streaming.fragments (", count,
                    ") exceeds the number of tensors (", layout.size(),
                    "); fragments never cut a tensor, so each needs at least one");
  const std::uint64_t total = total_size(layout);
  std::vector<Fragment> out;
  std::size_t t = 0;
  std::uint64_t offset = 0;
  for (std::uint32_t k = 0; k < count; ++k) {
    Fragment f;
    f.index = k;
    f.first_tensor = static_cast<std::uint32_t>(t);
    f.offset = offset;
    // Fragment k's target end; the last one takes everything left.
    const std::uint64_t target = k + 1 == count ? total : total / count * (k + 1) + total % count * (k + 1) / count;
    const std::size_t must_leave = count - k - 1;  // tensors the later fragments need
    do {
      f.length += layout[t].size();
      ++t;
    } while (t < layout.size() - must_leave && offset + f.length < target);
    f.tensor_count = static_cast<std::uint32_t>(t - f.first_tensor);
    offset += f.length;
    out.push_back(f);
  }
  return out;
}

std::uint64_t fragment_offset(std::uint32_t fragment, std::uint32_t fragments, std::uint64_t inner_steps) {
  return fragments == 0 ? 0 : static_cast<std::uint64_t>(fragment) * inner_steps / fragments;
}

std::vector<std::uint32_t> fragments_due(std::uint64_t step, std::uint32_t fragments, std::uint64_t inner_steps) {
  std::vector<std::uint32_t> due;
  if (step == 0 || inner_steps == 0) return due;
  const std::uint64_t phase = step % inner_steps;
  for (std::uint32_t f = 0; f < fragments; ++f) {
    if (fragment_offset(f, fragments, inner_steps) == phase) due.push_back(f);
  }
  return due;
}

Status merge_fragment(std::span<float> local, std::span<const float> global, double alpha) {
  GEOLOCO_RETURN_IF(local.size() != global.size(), Err::invalid_argument, "merge: local fragment has ", local.size(),
                    " values, global has ", global.size());
  GEOLOCO_RETURN_IF(!(alpha >= 0.0 && alpha <= 1.0), Err::invalid_argument, "merge: alpha must be in [0, 1], got ",
                    alpha);
  const float a = static_cast<float>(alpha);
  const float b = 1.0f - a;
  if (a == 0.0f) {
    // Plain DiLoCo: the replica restarts from the anchor, bit for bit.
    std::copy(global.begin(), global.end(), local.begin());
    return {};
  }
  for (std::size_t i = 0; i < local.size(); ++i) local[i] = a * local[i] + b * global[i];
  return {};
}

}  // namespace geoloco::outer
