#include "outer/sim/adamw.h"

#include <algorithm>
#include <cmath>

namespace geoloco::outer::sim {

Status AdamWOptions::validate() const {
  GEOLOCO_RETURN_IF(!(learning_rate > 0.0 && std::isfinite(learning_rate)), Err::invalid_argument,
                    "inner.lr must be finite and > 0, got ", learning_rate);
  GEOLOCO_RETURN_IF(!(beta1 >= 0.0 && beta1 < 1.0), Err::invalid_argument, "inner.beta1 must be in [0, 1), got ",
                    beta1);
  GEOLOCO_RETURN_IF(!(beta2 >= 0.0 && beta2 < 1.0), Err::invalid_argument, "inner.beta2 must be in [0, 1), got ",
                    beta2);
  GEOLOCO_RETURN_IF(!(epsilon > 0.0 && std::isfinite(epsilon)), Err::invalid_argument,
                    "inner.epsilon must be finite and > 0, got ", epsilon);
  GEOLOCO_RETURN_IF(!(weight_decay >= 0.0 && std::isfinite(weight_decay)), Err::invalid_argument,
                    "inner.weight_decay must be finite and >= 0, got ", weight_decay);
  GEOLOCO_RETURN_IF(!(final_lr_fraction >= 0.0 && final_lr_fraction <= 1.0), Err::invalid_argument,
                    "inner.final_lr_fraction must be in [0, 1], got ", final_lr_fraction);
  return {};
}

AdamW::AdamW(std::size_t parameters, AdamWOptions options)
    : options_(options), m_(parameters, 0.0f), v_(parameters, 0.0f) {}

Status AdamW::step(std::span<float> params, std::span<const float> grad) {
  GEOLOCO_RETURN_IF(params.size() != m_.size() || grad.size() != m_.size(), Err::invalid_argument,
                    "adamw: ", m_.size(), " parameters in the state, got ", params.size(), " parameters and ",
                    grad.size(), " gradients");
  ++t_;
  beta1_t_ *= options_.beta1;
  beta2_t_ *= options_.beta2;
  const float b1 = static_cast<float>(options_.beta1);
  const float b2 = static_cast<float>(options_.beta2);
  const float c1 = static_cast<float>(1.0 - options_.beta1);
  const float c2 = static_cast<float>(1.0 - options_.beta2);
  const float bias1 = static_cast<float>(1.0 - beta1_t_);
  const float bias2 = static_cast<float>(1.0 - beta2_t_);
  double lr_t = options_.learning_rate;
  if (options_.decay_steps > 0) {
    const double progress = static_cast<double>(std::min(t_ - 1, options_.decay_steps)) / options_.decay_steps;
    lr_t *= 1.0 - (1.0 - options_.final_lr_fraction) * progress;
  }
  const float lr = static_cast<float>(lr_t);
  const float eps = static_cast<float>(options_.epsilon);
  const float decay = static_cast<float>(lr_t * options_.weight_decay);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grad[i];
    m_[i] = b1 * m_[i] + c1 * g;
    v_[i] = b2 * v_[i] + c2 * g * g;
    const float m_hat = m_[i] / bias1;
    const float v_hat = v_[i] / bias2;
    params[i] = params[i] - lr * m_hat / (std::sqrt(v_hat) + eps) - decay * params[i];
  }
  return {};
}

}  // namespace geoloco::outer::sim
