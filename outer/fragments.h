// Streaming DiLoCo (DESIGN §1, last paragraph): the parameters are split into
// F fragments, contiguous ranges that never cut a tensor, and fragment f is
// synchronized every H inner steps at offset f·H/F, so only about 1/F of the
// model is in flight at any time. A fragment's exchange overlaps the next τ
// inner steps; then the site merges θ_f ← α θ_f(local) + (1 − α) θ_f(global).
//
// This file is the partition, the schedule and the merge, as pure functions.
// With F = 1, τ = 0, α = 0 it is plain DiLoCo: everything syncs every H
// steps and the replica restarts from the new anchor.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "outer/layout.h"

namespace geoloco::outer {

struct StreamingOptions {
  /// F: number of fragments, at least 1 and at most the number of tensors.
  std::uint32_t fragments = 1;
  /// τ: inner steps a fragment's exchange overlaps before the merge; < H.
  std::uint64_t overlap_steps = 0;
  /// α: weight of the local replica in the merge, in [0, 1]; 0 = take the global value.
  double alpha = 0.0;

  /// Checks the rules against H (`inner.steps`, the steps between two syncs
  /// of the same fragment, at least 1). Errors: invalid_argument naming the
  /// broken rule.
  Status validate(std::uint64_t inner_steps) const;
};

/// One fragment: tensors [first_tensor, first_tensor + tensor_count) of the
/// layout, i.e. values [offset, offset + length) of the flat buffer.
struct Fragment {
  std::uint32_t index = 0;
  std::uint32_t first_tensor = 0;
  std::uint32_t tensor_count = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

/// Cuts the layout into `count` contiguous fragments of about equal size:
/// fragment k ends at the first tensor boundary at or past (k+1)/count of the
/// total, but every fragment keeps at least one tensor. Errors:
/// invalid_argument (a bad layout, count 0 or more than the tensors).
Result<std::vector<Fragment>> partition_fragments(const std::vector<TensorInfo>& layout, std::uint32_t count);

/// f·H/F (integer division, H = inner_steps): the step, within each period of H, at which
/// fragment f starts its sync.
std::uint64_t fragment_offset(std::uint32_t fragment, std::uint32_t fragments, std::uint64_t inner_steps);

/// The fragments whose sync starts right after inner step `step` (counting
/// completed steps from 1): f is due when step ≡ f·H/F (mod H). Each
/// fragment is due exactly once in every H consecutive steps.
std::vector<std::uint32_t> fragments_due(std::uint64_t step, std::uint32_t fragments, std::uint64_t inner_steps);

/// θ_f ← α θ_f(local) + (1 − α) θ_f(global), elementwise in fp32.
/// Errors: invalid_argument (lengths differ, α outside [0, 1]).
Status merge_fragment(std::span<float> local, std::span<const float> global, double alpha);

}  // namespace geoloco::outer
