// How long a site's inner phase is (DESIGN §1 step 1): a fixed number of
// steps (`inner.steps`), or as many as fit in a time budget
// (`inner.duration`), so fast and slow hardware both stay busy. With a time
// budget sites run different step counts, which is why aggregation weights
// by tokens (straggler.h). A pure function: the caller measures the step
// time and passes it in.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace geoloco::outer {

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

/// Steps to run this round: `steps`, or floor(duration_s / seconds_per_step)
/// but at least min_steps. Errors: invalid_argument (options, or a
/// non-positive step time with a time budget).
Result<std::uint64_t> planned_inner_steps(const InnerPhaseOptions& options, double seconds_per_step);

}  // namespace geoloco::outer
