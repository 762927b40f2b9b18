#include "inner/optim/schedule.h"

#include <cmath>
#include <numbers>

namespace geoloco::inner {

Status ScheduleOptions::validate() const {
  GEOLOCO_RETURN_IF(!(lr > 0.0 && std::isfinite(lr)), Err::invalid_argument,
                    "schedule: lr must be finite and > 0, got ", lr);
  GEOLOCO_RETURN_IF(!(min_lr_fraction >= 0.0 && min_lr_fraction <= 1.0), Err::invalid_argument,
                    "schedule: min_lr_fraction must be in [0, 1], got ", min_lr_fraction);
  GEOLOCO_RETURN_IF(total_steps > 0 && warmup_steps > total_steps, Err::invalid_argument, "schedule: warmup_steps (",
                    warmup_steps, ") must not exceed total_steps (", total_steps, ")");
  GEOLOCO_RETURN_IF(phase_warmup > 0 && phase_steps == 0, Err::invalid_argument,
                    "schedule: a per-phase warmup needs inner phases of a fixed number of steps (H)");
  GEOLOCO_RETURN_IF(phase_warmup > phase_steps, Err::invalid_argument, "schedule: the per-phase warmup (", phase_warmup,
                    " steps) must not exceed the phase (", phase_steps, " steps)");
  return {};
}

namespace {

double global_rate(const ScheduleOptions& o, std::uint64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  if (o.total_steps == 0) return o.lr;
  const double min = o.lr * o.min_lr_fraction;
  if (step >= o.total_steps) return min;
  const double progress =
      static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.total_steps - o.warmup_steps);
  return min + 0.5 * (o.lr - min) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace

double learning_rate(const ScheduleOptions& o, std::uint64_t step) {
  const double rate = global_rate(o, step);
  if (o.phase_warmup == 0 || o.phase_steps == 0) return rate;
  const std::uint64_t in_phase = step % o.phase_steps;
  if (in_phase >= o.phase_warmup) return rate;
  return rate * static_cast<double>(in_phase + 1) / static_cast<double>(o.phase_warmup);
}

}  // namespace geoloco::inner
