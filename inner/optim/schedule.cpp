#include "inner/optim/schedule.h"

#include <cmath>
#include <numbers>

namespace geoloco::inner {

Status ScheduleOptions::validate() const {
  GEOLOCO_RETURN_IF(!(lr > 0.0 && std::isfinite(lr)), Err::invalid_argument, "schedule: lr must be finite and > 0, got ",
                    lr);
  GEOLOCO_RETURN_IF(!(min_lr_fraction >= 0.0 && min_lr_fraction <= 1.0), Err::invalid_argument,
                    "schedule: min_lr_fraction must be in [0, 1], got ", min_lr_fraction);
  GEOLOCO_RETURN_IF(total_steps > 0 && warmup_steps > total_steps, Err::invalid_argument, "schedule: warmup_steps (",
                    warmup_steps, ") must not exceed total_steps (", total_steps, ")");
  return {};
}

double learning_rate(const ScheduleOptions& o, std::uint64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  if (o.total_steps == 0) return o.lr;
  const double min = o.lr * o.min_lr_fraction;
  if (step >= o.total_steps) return min;
  const double progress =
      static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.total_steps - o.warmup_steps);
  return min + 0.5 * (o.lr - min) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace geoloco::inner
