#include "inner/optim/clip.h"

#include <cmath>

namespace geoloco::inner {

double global_norm(std::span<const float> grads) {
  double sum = 0.0;
  for (float g : grads) sum += static_cast<double>(g) * static_cast<double>(g);
  return std::sqrt(sum);
}

Result<double> clip_global_norm(std::span<float> grads, double max_norm) {
  const double norm = global_norm(grads);
  GEOLOCO_RETURN_IF(!std::isfinite(norm), Err::non_finite, "gradient norm is ", norm,
                    " (the loss diverged or the data holds non-finite values)");
  if (max_norm > 0.0 && norm > max_norm) {
    const float scale = static_cast<float>(max_norm / norm);
    for (float& g : grads) g *= scale;
  }
  return norm;
}

}  // namespace geoloco::inner
