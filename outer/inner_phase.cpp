#include "outer/inner_phase.h"

#include <algorithm>
#include <cmath>

namespace geoloco::outer {

Status InnerPhaseOptions::validate() const {
  GEOLOCO_RETURN_IF(steps < 1, Err::invalid_argument, "inner.steps must be at least 1, got ", steps);
  GEOLOCO_RETURN_IF(!(duration_s >= 0.0 && std::isfinite(duration_s)), Err::invalid_argument,
                    "inner.duration must be a finite number of seconds >= 0 (0 = use inner.steps), got ", duration_s);
  GEOLOCO_RETURN_IF(min_steps < 1, Err::invalid_argument, "inner.min_steps must be at least 1, got ", min_steps);
  return {};
}

Result<std::uint64_t> planned_inner_steps(const InnerPhaseOptions& options, double seconds_per_step) {
  GEOLOCO_TRY(options.validate());
  if (options.duration_s == 0.0) return options.steps;
  GEOLOCO_RETURN_IF(!(seconds_per_step > 0.0 && std::isfinite(seconds_per_step)), Err::invalid_argument,
                    "a time-based inner phase needs a measured step time > 0 s, got ", seconds_per_step);
  const double fit = std::floor(options.duration_s / seconds_per_step);
  // Clamp before converting: a huge ratio must not overflow the integer.
  const double capped = std::min(fit, 1e15);
  return std::max<std::uint64_t>(options.min_steps, static_cast<std::uint64_t>(capped));
}

}  // namespace geoloco::outer
