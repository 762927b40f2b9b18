// How long a site's inner phase is: a fixed number of steps (`inner.steps`,
// H), or as many as fit in a time budget (`inner.duration`), at least
// `min_steps`, so fast and slow hardware both stay busy. With a time budget
// sites run different step counts, which is why aggregation weights by
// tokens (straggler.h). The trainer asks phase_over() after every step with
// its clock; the simulator asks it with a modelled one.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace geoloco::diloco {

struct InnerPhaseOptions {
  /// Inner steps per round when `duration_s` is 0. At least 1.
  std::uint64_t steps = 500;
  /// Time budget of the inner phase in seconds; 0 = use `steps`.
  double duration_s = 0.0;
  /// Fewest steps a time-based phase runs, however slow the site (at least 1).
  std::uint64_t min_steps = 1;

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

/// Whether a phase that has taken `steps` steps, `seconds` after it began,
/// is over: steps ≥ H; or, time-based, seconds ≥ duration_s and steps ≥
/// min_steps.
bool phase_over(const InnerPhaseOptions& options, std::uint64_t steps, double seconds);

}  // namespace geoloco::diloco
