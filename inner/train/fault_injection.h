// Faults a test can inject into geoloco-train from outside, through the
// environment (the daemon's tests start the real binary and cannot reach
// into it). Only a slow step for now: GEOLOCO_TRAIN_STEP_DELAY_MS=N makes
// every inner step of every worker sleep N ms, so a site becomes the
// straggler of a multi-site test. Not for production: the trainer prints
// the fault once at start, so a log shows it.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace geoloco::inner {

inline constexpr const char* kStepDelayEnv = "GEOLOCO_TRAIN_STEP_DELAY_MS";

/// The step delay in ms from the variable's value: unset (nullptr) is 0;
/// otherwise a plain decimal integer (digits only, at most 3'600'000, one
/// hour). Errors: invalid_argument naming the variable and the value.
Result<std::uint64_t> parse_step_delay_ms(const char* value);

}  // namespace geoloco::inner
