#include "diloco/outer_step.h"

#include <cmath>

#include "common/finite.h"

namespace geoloco::diloco {

Status OuterOptimizerOptions::validate() const {
  GEOLOCO_RETURN_IF(!(learning_rate > 0.0 && learning_rate <= 10.0), Err::invalid_argument,
                    "outer.lr must be in (0, 10], got ", learning_rate);
  GEOLOCO_RETURN_IF(!(momentum >= 0.0 && momentum < 1.0), Err::invalid_argument,
                    "outer.momentum must be in [0, 1), got ", momentum);
  GEOLOCO_RETURN_IF(!(clip_norm >= 0.0 && std::isfinite(clip_norm)), Err::invalid_argument,
                    "outer.clip must be a finite norm >= 0 (0 turns clipping off), got ", clip_norm);
  return {};
}

float clip_scale(double norm, double clip_norm) {
  if (clip_norm <= 0.0 || !(norm > clip_norm)) return 1.0f;
  return static_cast<float>(clip_norm / norm);
}

double squared_norm(std::span<const float> delta) { return add_squares(0.0, delta); }

double add_squares(double sum, std::span<const float> values) {
  for (float v : values) sum += static_cast<double>(v) * static_cast<double>(v);
  return sum;
}

namespace {

// outer_step()'s refusals, before anything is written.
Status check_step(std::size_t anchor, std::size_t momentum, std::span<const float> delta,
                  const OuterOptimizerOptions& options, float scale) {
  GEOLOCO_TRY(options.validate());
  GEOLOCO_RETURN_IF(anchor != momentum || anchor != delta.size(), Err::invalid_argument, "outer step: anchor (", anchor,
                    "), momentum (", momentum, ") and delta (", delta.size(), ") must have the same length");
  GEOLOCO_RETURN_IF(!(scale > 0.0f && scale <= 1.0f), Err::invalid_argument,
                    "outer step: the clipping scale must be in (0, 1], got ", scale);
  // Check first so that a bad Δ changes nothing (all sites must stay equal).
  if (const auto i = first_non_finite(delta))
    return GEOLOCO_ERROR(Err::non_finite, "outer step: pseudo-gradient value ", *i, " is ", delta[*i]);
  return {};
}

// One value's step, the same operations in the same order wherever it is
// applied (outer_step() in place, outer_stepped_anchor() aside).
class ElementStep {
 public:
  ElementStep(const OuterOptimizerOptions& options, float scale)
      : eta_(static_cast<float>(options.learning_rate)),
        mu_(static_cast<float>(options.momentum)),
        nesterov_(options.algorithm == OuterAlgorithm::nesterov),
        scale_(scale) {}
  // scale == 1 multiplies exactly, so unclipped steps see Δ unchanged.
  float momentum(float m, float delta) const { return mu_ * m + delta * scale_; }
  float anchor(float a, float delta, float m) const {
    const float update = nesterov_ ? delta * scale_ + mu_ * m : m;
    return a - eta_ * update;
  }

 private:
  float eta_, mu_;
  bool nesterov_;
  float scale_;
};

}  // namespace

Status outer_step(std::span<float> anchor, std::span<float> momentum, std::span<const float> delta,
                  const OuterOptimizerOptions& options, float scale) {
  GEOLOCO_TRY(check_step(anchor.size(), momentum.size(), delta, options, scale));
  const ElementStep step(options, scale);
  for (std::size_t i = 0; i < anchor.size(); ++i) {
    const float m = step.momentum(momentum[i], delta[i]);
    momentum[i] = m;
    anchor[i] = step.anchor(anchor[i], delta[i], m);
  }
  return {};
}

Status outer_stepped_anchor(std::span<const float> anchor, std::span<const float> momentum,
                            std::span<const float> delta, const OuterOptimizerOptions& options, float scale,
                            std::span<float> out) {
  GEOLOCO_TRY(check_step(anchor.size(), momentum.size(), delta, options, scale));
  GEOLOCO_RETURN_IF(out.size() != anchor.size(), Err::invalid_argument, "outer step: the output has ", out.size(),
                    " values for ", anchor.size());
  const ElementStep step(options, scale);
  for (std::size_t i = 0; i < anchor.size(); ++i)
    out[i] = step.anchor(anchor[i], delta[i], step.momentum(momentum[i], delta[i]));  // the momentum in a register
  return {};
}

}  // namespace geoloco::diloco
