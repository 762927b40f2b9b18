// Streaming DiLoCo: the parameters are split into F fragments, contiguous
// ranges that never cut a tensor, and each round of the job syncs ONE of
// them, so only about 1/F of the model is in flight at a time. A fragment's
// exchange overlaps the next τ inner steps; then the site merges
// θ_f ← α θ_f(local) + (1 − α) θ_f(global). With F = 1, τ = 0, α = 0 it is
// plain DiLoCo: a round syncs the whole model every H steps.
//
// This file is the cut, the schedule and the merge, as pure functions; the
// daemon, the trainer and the simulator all use these and no other copy.
//
// The schedule, with H inner steps between two syncs of the same fragment:
// round k (counted from 1) syncs fragment k mod F after
// steps_through_round(k) steps, so in every period of H steps the fragments
// sync in the order 1, 2, …, F−1, 0:
//
//   fragment_of_round(k)   = k mod F
//   steps_through_round(k) = ((k−1) div F)·H + ((k−1) mod F + 1)·H div F
//
// so F rounds make one period of H steps, and round F·n ends period n.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace geoloco::diloco {

struct StreamingOptions {
  /// F: number of fragments, at least 1 and at most the number of tensors.
  std::uint32_t fragments = 1;
  /// τ: inner steps a fragment's exchange overlaps before the merge.
  std::uint64_t overlap_steps = 0;
  /// α: weight of the local replica in the merge, in [0, 1]; 0 = take the global value.
  double alpha = 0.0;
  /// The delayed outer step (`merge: delayed`): the merge keeps the local
  /// progress made since the sync, θ ← θ(global) + (θ(local) − θ(at sync)),
  /// instead of replacing it (merge_fragment_delayed). With τ = H − 1 (F = 1)
  /// the next inner phase starts at once from the site's own parameters and
  /// round r's update lands during round r + 1.
  bool delayed = false;

  /// Checks the rules against H (`inner.steps`, at least 1): F ≥ 1, τ < H,
  /// α in [0, 1], no α with the delayed merge. Errors: invalid_argument
  /// naming the broken rule.
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

/// Cuts a model whose tensors hold `tensor_sizes` values (in buffer order,
/// each ≥ 1) into `count` contiguous fragments of about equal size: fragment
/// k ends at the first tensor boundary at or past (k+1)/count of the values,
/// but every fragment keeps at least one tensor. Errors: invalid_argument
/// (count 0 or more than the tensors, an empty tensor).
Result<std::vector<Fragment>> cut_fragments(std::span<const std::uint64_t> tensor_sizes, std::uint32_t count);

/// The fragment round k (>= 1, counted from the job's first round) syncs; F >= 1.
std::uint32_t fragment_of_round(std::uint64_t k, std::uint32_t fragments);

/// The first round at or after `from` (>= 1) that syncs `fragment` (< F).
std::uint64_t next_round_of_fragment(std::uint32_t fragment, std::uint64_t from, std::uint32_t fragments);

/// The inner steps a job has taken when round k's sync starts (k >= 1), H =
/// `inner_steps` >= 1; 0 for k = 0.
std::uint64_t steps_through_round(std::uint64_t k, std::uint32_t fragments, std::uint64_t inner_steps);

/// The inner steps of the phase that ends with the sync of `round` (round
/// k = round − first_round + 1 of the job): steps_through_round(k) −
/// steps_through_round(k − 1); H with F = 1. A round before the first is
/// counted as the first.
std::uint64_t phase_steps(std::uint64_t round, std::uint64_t first_round, std::uint32_t fragments,
                          std::uint64_t inner_steps);

/// The overlap the delayed outer step takes when none is given: the whole
/// next phase, H − 1 steps (H/F with fragments; 0 when H is 1).
std::uint64_t delayed_overlap(std::uint64_t inner_steps, std::uint32_t fragments);

/// θ ← α·θ(local) + (1 − α)·θ(global), value by value, in double rounded to
/// fp32 (the same bits on every machine: no contraction); α = 0 copies
/// `global` exactly, whatever `local` holds. Errors: invalid_argument
/// (lengths differ, α outside [0, 1]).
Status merge_fragment(std::span<float> local, std::span<const float> global, double alpha);

/// The delayed outer step's merge: θ ← θ(global) + (θ(local) − θ(at sync)),
/// value by value, in double rounded to fp32 (the same bits on every
/// machine): the fragment moves from where the site synced it to where the
/// round put it, and keeps the steps trained since. Errors: invalid_argument
/// (lengths differ).
Status merge_fragment_delayed(std::span<float> local, std::span<const float> global, std::span<const float> at_sync);

}  // namespace geoloco::diloco
