#include "inner/cpu/adamw.h"

#include <cmath>

namespace geoloco::inner::cpu {

Status AdamWOptions::validate() const {
  GEOLOCO_RETURN_IF(!(beta1 >= 0.0 && beta1 < 1.0), Err::invalid_argument, "adamw: beta1 must be in [0, 1), got ",
                    beta1);
  GEOLOCO_RETURN_IF(!(beta2 >= 0.0 && beta2 < 1.0), Err::invalid_argument, "adamw: beta2 must be in [0, 1), got ",
                    beta2);
  GEOLOCO_RETURN_IF(!(epsilon > 0.0 && std::isfinite(epsilon)), Err::invalid_argument,
                    "adamw: epsilon must be finite and > 0, got ", epsilon);
  GEOLOCO_RETURN_IF(!(weight_decay >= 0.0 && std::isfinite(weight_decay)), Err::invalid_argument,
                    "adamw: weight_decay must be finite and >= 0, got ", weight_decay);
  return {};
}

AdamW::AdamW(std::size_t parameters, AdamWOptions options,
             std::vector<std::pair<std::size_t, std::size_t>> decay_ranges)
    : options_(options), m_(parameters, 0.0f), v_(parameters, 0.0f), decay_(parameters, 0) {
  for (auto [begin, end] : decay_ranges)
    for (std::size_t i = begin; i < end && i < parameters; ++i) decay_[i] = 1;
}

Status AdamW::step(std::span<float> params, std::span<const float> grads, double lr) {
  GEOLOCO_RETURN_IF(params.size() != m_.size() || grads.size() != m_.size(), Err::invalid_argument, "adamw: state has ",
                    m_.size(), " values, got ", params.size(), " parameters and ", grads.size(), " gradients");
  GEOLOCO_RETURN_IF(!(lr >= 0.0 && std::isfinite(lr)), Err::invalid_argument, "adamw: lr must be finite and >= 0, got ",
                    lr);
  ++t_;
  beta1_t_ *= options_.beta1;
  beta2_t_ *= options_.beta2;
  const float b1 = static_cast<float>(options_.beta1);
  const float b2 = static_cast<float>(options_.beta2);
  const float c1 = static_cast<float>(1.0 - options_.beta1);
  const float c2 = static_cast<float>(1.0 - options_.beta2);
  const float bias1 = static_cast<float>(1.0 - beta1_t_);
  const float bias2 = static_cast<float>(1.0 - beta2_t_);
  const float eps = static_cast<float>(options_.epsilon);
  const float rate = static_cast<float>(lr);
  const float shrink = static_cast<float>(1.0 - lr * options_.weight_decay);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grads[i];
    m_[i] = b1 * m_[i] + c1 * g;
    v_[i] = b2 * v_[i] + c2 * g * g;
    const float m_hat = m_[i] / bias1;
    const float v_hat = v_[i] / bias2;
    const float theta = decay_[i] ? params[i] * shrink : params[i];
    params[i] = theta - rate * m_hat / (std::sqrt(v_hat) + eps);
  }
  return {};
}

Status AdamW::restore(std::span<const float> m, std::span<const float> v, std::uint64_t steps) {
  GEOLOCO_RETURN_IF(m.size() != m_.size() || v.size() != v_.size(), Err::invalid_argument, "adamw: state has ",
                    m_.size(), " values, restore got ", m.size(), " and ", v.size());
  m_.assign(m.begin(), m.end());
  v_.assign(v.begin(), v.end());
  t_ = steps;
  beta1_t_ = 1.0;
  beta2_t_ = 1.0;
  for (std::uint64_t i = 0; i < steps; ++i) {
    beta1_t_ *= options_.beta1;
    beta2_t_ *= options_.beta2;
  }
  return {};
}

}  // namespace geoloco::inner::cpu
