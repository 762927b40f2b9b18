#include "daemon/phase_plan.h"

#include <algorithm>

namespace geoloco::daemon {

inner::protocol::PhasePlan phase_plan_of(const job::JobSpec& spec) {
  inner::protocol::PhasePlan plan;
  const bool timed = spec.outer.inner.duration_s > 0;
  plan.sync_every = timed ? 0 : spec.outer.inner.steps;
  plan.sync_seconds = timed ? spec.outer.inner.duration_s : 0.0;
  plan.min_steps = std::max<std::uint64_t>(spec.outer.inner.min_steps, 1);
  plan.overlap_steps = spec.outer.streaming.overlap_steps;
  plan.alpha = spec.outer.streaming.alpha;
  plan.merge_delayed = spec.outer.streaming.delayed;
  plan.first_round = 1;
  plan.stop_rounds = spec.stop_rounds.value_or(0);
  return plan;
}

}  // namespace geoloco::daemon
