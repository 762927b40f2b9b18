// Which fragment a round synchronizes under Streaming DiLoCo (DESIGN §1, last
// paragraph), as geolocod and its trainers agree on it. With F fragments and
// H inner steps between two syncs of the same fragment, fragment f syncs
// after the steps f·H/F, f·H/F + H, … (outer/fragments.h: fragments_due), so
// in every period of H steps the fragments sync in the order 1, 2, …, F−1, 0.
// geolocod gives each of those syncs its own round: a job's round k (counted
// from 1) syncs fragment k mod F after step ⌈k/F⌉… precisely:
//
//   fragment_of_round(k) = k mod F          (k = 1 … F−1 → 1 … F−1, k = F → 0)
//   steps_through_round(k) = ((k−1) div F)·H + ((k−1) mod F + 1)·H div F
//
// so F rounds make one period of H steps, and round F·n ends period n.
// With F = 1 a round is a plain DiLoCo round of H steps.
//
// The WELCOME's fragment table carries each fragment's next round, so a
// trainer needs none of this to know what to sync next: the fragments whose
// next round is the smallest go together. A trainer uses
// steps_through_round() only to place its syncs in its step count.
#pragma once

#include <cstdint>

namespace geoloco::inner::protocol {

/// The fragment round k (>= 1, counted from the job's first round) syncs; F >= 1.
std::uint32_t fragment_of_round(std::uint64_t k, std::uint32_t fragments);

/// The first round at or after `from` (>= 1) that syncs `fragment` (< F).
std::uint64_t next_round_of_fragment(std::uint32_t fragment, std::uint64_t from, std::uint32_t fragments);

/// The inner steps a job has taken when round k's sync starts (k >= 1), H =
/// `inner_steps` >= 1; 0 for k = 0.
std::uint64_t steps_through_round(std::uint64_t k, std::uint32_t fragments, std::uint64_t inner_steps);

}  // namespace geoloco::inner::protocol
