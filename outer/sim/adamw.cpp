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

namespace {
inner::cpu::AdamWOptions inner_options(const AdamWOptions& o) {
  inner::cpu::AdamWOptions i;
  i.beta1 = o.beta1;
  i.beta2 = o.beta2;
  i.epsilon = o.epsilon;
  i.weight_decay = o.weight_decay;
  return i;
}
}  // namespace

AdamW::AdamW(std::size_t parameters, AdamWOptions options)
    : options_(options),
      inner_(parameters, inner_options(options),
             options.weight_decay > 0 ? std::vector<std::pair<std::size_t, std::size_t>>{{0, parameters}}
                                      : std::vector<std::pair<std::size_t, std::size_t>>{}) {}

Status AdamW::step(std::span<float> params, std::span<const float> grad) {
  // The step about to be taken is number steps() + 1; the decay counts from 0.
  double lr = options_.learning_rate;
  if (options_.decay_steps > 0) {
    const double progress =
        static_cast<double>(std::min<std::uint64_t>(inner_.steps(), options_.decay_steps)) / options_.decay_steps;
    lr *= 1.0 - (1.0 - options_.final_lr_fraction) * progress;
  }
  return inner_.step(params, grad, lr);
}

}  // namespace geoloco::outer::sim
