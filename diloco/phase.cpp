#include "diloco/phase.h"

#include <cmath>

namespace geoloco::diloco {

Status InnerPhaseOptions::validate() const {
  GEOLOCO_RETURN_IF(steps < 1, Err::invalid_argument, "inner.steps must be at least 1, got ", steps);
  GEOLOCO_RETURN_IF(!(duration_s >= 0.0 && std::isfinite(duration_s)), Err::invalid_argument,
                    "inner.duration must be a finite number of seconds >= 0 (0 = use inner.steps), got ", duration_s);
  GEOLOCO_RETURN_IF(min_steps < 1, Err::invalid_argument, "inner.min_steps must be at least 1, got ", min_steps);
  return {};
}

bool phase_over(const InnerPhaseOptions& options, std::uint64_t steps, double seconds) {
  if (options.duration_s > 0.0) return steps >= options.min_steps && seconds >= options.duration_s;
  return steps >= options.steps;
}

}  // namespace geoloco::diloco
