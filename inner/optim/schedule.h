// The inner learning-rate schedule: linear warmup, then cosine decay to a
// floor. A pure function of the step, so any rank, and a trainer restarted
// at step s, computes the same rate.
//
//   step < warmup:            lr · (step + 1) / warmup
//   warmup <= step < total:   min + ½ (lr − min) (1 + cos(π · (step − warmup) / (total − warmup)))
//   step >= total:            min
// with min = lr · min_lr_fraction. total = 0 means no decay (constant after warmup).
//
// A per-phase warmup (DiLoCo's inner phases of phase_steps = H steps) scales
// that rate by min(1, (step mod H + 1) / phase_warmup): every inner phase
// ramps up again from the anchor it starts at. Phases start at multiples of
// H from step 0, as the daemon's rounds do.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace geoloco::inner {

struct ScheduleOptions {
  double lr = 3e-4;                ///< peak learning rate, > 0
  std::uint64_t warmup_steps = 0;  ///< linear ramp length, <= total_steps when total_steps > 0
  std::uint64_t total_steps = 0;   ///< end of the cosine (0 = constant after warmup)
  double min_lr_fraction = 0.1;    ///< floor as a fraction of lr, in [0, 1]
  std::uint64_t phase_steps = 0;   ///< H: steps per inner phase (0 = no phases)
  std::uint64_t phase_warmup = 0;  ///< linear ramp at the start of each phase, <= phase_steps (0 = none)

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

/// The learning rate of 0-based step `step`.
double learning_rate(const ScheduleOptions& options, std::uint64_t step);

}  // namespace geoloco::inner
