// geoloco-train's --state-dir: the inner optimizer's state kept across a
// trainer restart, so a trainer the daemon restarts continues as if it had
// not died (docs/design.md §1: "inner optimizer state stays on the site across
// rounds").
//
// What is saved, by rank 0 after every sync, in <dir>/inner_state.bin:
//   the round it belongs to (the round the trainer trains next from the
//   anchor that sync brought), the trainer's step count (schedule and data
//   position), AdamW's step count (bias correction) and both moments (fp32).
// One file, not one per worker: every worker applies the same all-reduced
// gradient to the same parameters, so their AdamW states are the same bits
// (trainer.h); a restarted group loads rank 0's file and broadcasts it.
// Parameters are not saved: the daemon owns the anchor and hands it over in
// WELCOME.
//
// A trainer welcomed at round r uses the file only when its round is r
// (choose_inner_state): a state from an earlier round would pair moments
// with an anchor they were not computed for.
//
// Format (little-endian):
//   u32 magic "GLIS", u32 version 1, u64 round, u64 steps_done, u64 adamw_steps,
//   u64 values n, u64 layout digest, f32 m[n], f32 v[n], u64 xxh3-64 of all before.
// Written to <dir>/inner_state.bin.tmp, fsynced, renamed over the file, and
// the folder fsynced: a kill at any moment leaves the old file or the new
// one, never a torn one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "inner/layout.h"

namespace geoloco::inner {

struct InnerState {
  std::uint64_t round = 0;          ///< the round this state goes with
  std::uint64_t steps_done = 0;     ///< the trainer's steps when it was saved
  std::uint64_t adamw_steps = 0;    ///< AdamW's t
  std::uint64_t layout_digest = 0;  ///< layout_digest() of the model
  std::vector<float> m, v;          ///< AdamW's moments
};

/// <dir>/inner_state.bin
std::string inner_state_path(const std::string& dir);

/// xxh3-64 over the layout's tensor names and shapes: a state saved by
/// another model (or another shape of it) is not used.
std::uint64_t layout_digest(const ParamLayout& layout);

/// Saves atomically (see the file comment), creating `dir` if needed.
/// Errors: invalid_argument (m and v differ in size), io.
Status save_inner_state(const std::string& dir, std::uint64_t round, std::uint64_t steps_done,
                        std::uint64_t adamw_steps, std::uint64_t layout_digest, std::span<const float> m,
                        std::span<const float> v);

/// The saved state, or nullopt when `dir` holds none. Errors: io,
/// malformed (magic, version, digest), truncated, too_large (a length that
/// does not match the file's size).
Result<std::optional<InnerState>> load_inner_state(const std::string& dir);

struct StateChoice {
  bool use = false;
  std::string reason;  ///< for the trainer's stdout, e.g. "no saved inner state in DIR: zero AdamW moments"
};

/// Whether a trainer welcomed at `round` with a model of `layout_digest`
/// and `values` parameters uses `loaded`. A pure function.
StateChoice choose_inner_state(const Result<std::optional<InnerState>>& loaded, const std::string& dir,
                               std::uint64_t round, std::uint64_t layout_digest, std::size_t values);

}  // namespace geoloco::inner
