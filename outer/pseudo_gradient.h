// The pseudo-gradient of DESIGN §1 step 2: Δ_s = θ_r − θ_s, in fp32, one
// subtraction per value and nothing else, so every site computes the same
// bits from the same inputs. Works on any range (a chunk or a fragment).
#pragma once

#include <span>

#include "common/status.h"

namespace geoloco::outer {

/// out[i] = anchor[i] − local[i]. Errors: invalid_argument (sizes differ),
/// non_finite (a NaN or Inf in the local replica, named by index: a diverged
/// trainer must not poison the anchor of every site).
Status pseudo_gradient(std::span<const float> anchor, std::span<const float> local, std::span<float> out);

}  // namespace geoloco::outer
