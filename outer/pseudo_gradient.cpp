#include "outer/pseudo_gradient.h"

#include <cmath>

namespace geoloco::outer {

Status pseudo_gradient(std::span<const float> anchor, std::span<const float> local, std::span<float> out) {
  GEOLOCO_RETURN_IF(anchor.size() != local.size() || anchor.size() != out.size(), Err::invalid_argument,
                    "pseudo-gradient: anchor (", anchor.size(), "), local replica (", local.size(), ") and output (",
                    out.size(), ") must have the same length");
  for (std::size_t i = 0; i < anchor.size(); ++i) {
    GEOLOCO_RETURN_IF(!std::isfinite(local[i]), Err::non_finite, "pseudo-gradient: local parameter ", i, " is ",
                      local[i], "; the inner phase diverged");
    out[i] = anchor[i] - local[i];
  }
  return {};
}

}  // namespace geoloco::outer
