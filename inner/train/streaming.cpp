// Streaming DiLoCo decisions (streaming.h).
#include "inner/train/streaming.h"

#include <algorithm>
#include <cmath>

namespace geoloco::inner {

Result<SyncPlan> plan_sync(std::span<const protocol::FragmentDesc> table, std::uint64_t sync_every, double sync_seconds,
                           std::uint64_t overlap_steps, double alpha) {
  GEOLOCO_RETURN_IF(table.empty(), Err::invalid_argument, "the daemon's fragment table is empty");
  GEOLOCO_RETURN_IF(!(alpha >= 0.0 && alpha <= 1.0), Err::invalid_argument, "--alpha must be in [0, 1], got ", alpha);
  const bool one_round = std::all_of(
      table.begin(), table.end(), [&](const protocol::FragmentDesc& f) { return f.next_round == table[0].next_round; });
  SyncPlan plan;
  plan.streaming = !one_round || overlap_steps > 0 || alpha > 0.0;
  plan.schedule_fragments = one_round ? 1 : static_cast<std::uint32_t>(table.size());
  if (!plan.streaming) return plan;
  const std::uint32_t f = plan.schedule_fragments;
  GEOLOCO_RETURN_IF(sync_seconds > 0.0, Err::invalid_argument, "streaming (",
                    one_round ? "--overlap or --alpha" : cat(f, " fragments that sync in turn"),
                    ") needs step-based phases: use --sync-every H instead of --sync-seconds");
  GEOLOCO_RETURN_IF(sync_every < f, Err::invalid_argument, "--sync-every ", sync_every, " is smaller than the job's ",
                    f, " fragments: every fragment's round needs at least one inner step");
  GEOLOCO_RETURN_IF(overlap_steps > sync_every / f, Err::invalid_argument, "--overlap ", overlap_steps,
                    " is longer than the smallest phase (H/F = ", sync_every, "/", f, " = ", sync_every / f,
                    " steps): one fragment in flight at a time, so a fragment must be merged before the next one "
                    "syncs");
  return plan;
}

std::uint64_t sync_round(std::span<const std::uint64_t> next_rounds) {
  return next_rounds.empty() ? 0 : *std::min_element(next_rounds.begin(), next_rounds.end());
}

std::vector<std::uint32_t> fragments_due(std::span<const std::uint64_t> next_rounds) {
  const std::uint64_t r = sync_round(next_rounds);
  std::vector<std::uint32_t> due;
  for (std::size_t f = 0; f < next_rounds.size(); ++f)
    if (next_rounds[f] == r) due.push_back(static_cast<std::uint32_t>(f));
  return due;
}

}  // namespace geoloco::inner
