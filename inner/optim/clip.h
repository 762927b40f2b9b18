// Global gradient-norm clipping: if ‖g‖₂ over ALL parameters exceeds
// max_norm, scale every gradient by max_norm / ‖g‖₂. The norm is summed in
// double in index order, so every rank (which holds the same averaged
// gradient) takes the same decision.
#pragma once

#include <span>

#include "common/status.h"

namespace geoloco::inner {

/// ‖g‖₂, summed in double in index order.
double global_norm(std::span<const float> grads);

/// Clips in place and returns the norm before clipping. max_norm <= 0
/// disables clipping (the norm is still returned). Errors: non_finite when
/// the norm is NaN or Inf (a diverged step must not be applied silently).
Result<double> clip_global_norm(std::span<float> grads, double max_norm);

}  // namespace geoloco::inner
