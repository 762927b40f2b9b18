// geoloco-train's decisions for Streaming DiLoCo (docs/design.md §1, last paragraph),
// as pure functions: which mode a WELCOME table asks for, which
// round and fragments sync next, how long each inner phase is, and the
// merge of a fragment's new global values into the local replica. The loop
// that applies them is run_training() (TrainHooks::on_merge); the protocol
// calls are daemon_sync.h; the schedule itself and the merge, shared with
// geolocod and the simulator, are diloco/fragments.h.
//
// Two modes:
//   plain      the table's fragments share one next round and τ = α = 0:
//              every round syncs every fragment, rank 0 trains in the
//              daemon's segment and waits for the anchor (DiLoCo as before);
//   streaming  otherwise: the trainer owns its parameters, a phase ends
//              after one round's share of the schedule, the due fragments
//              are copied into the segment and synced, training goes on τ
//              steps, then θ_f ← α·θ_f(local) + (1 − α)·θ_f(global).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "inner/protocol/message.h"

namespace geoloco::inner {

struct SyncPlan {
  bool streaming = false;
  /// F of the step schedule: the table's fragment count when their next
  /// rounds differ (a round syncs one fragment), else 1 (a round syncs all).
  std::uint32_t schedule_fragments = 1;
};

/// The plan for a trainer welcomed with `table`, given its phases (H =
/// `sync_every` steps or `sync_seconds`), overlap τ and merge weight α.
/// Errors: invalid_argument when streaming meets time-based phases, when H
/// is smaller than F (a round without a step), or when τ exceeds the
/// smallest phase ⌊H/F⌋ (one fragment in flight at a time).
Result<SyncPlan> plan_sync(std::span<const protocol::FragmentDesc> table, std::uint64_t sync_every, double sync_seconds,
                           std::uint64_t overlap_steps, double alpha);

/// The round the trainer syncs next: the smallest next round of the table.
std::uint64_t sync_round(std::span<const std::uint64_t> next_rounds);

/// The fragments that sync at sync_round(): those whose next round it is.
std::vector<std::uint32_t> fragments_due(std::span<const std::uint64_t> next_rounds);

}  // namespace geoloco::inner
