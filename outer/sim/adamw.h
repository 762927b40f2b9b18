// The simulator's inner optimizer: the inner trainer's AdamW
// (inner/cpu/adamw.h, one implementation for both) with the simulator's
// learning-rate rule, optionally decaying linearly (no libm calls: the same
// bits everywhere). Weight decay, when set, applies to every parameter.
#pragma once

#include "inner/cpu/adamw.h"

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace geoloco::outer::sim {

struct AdamWOptions {
  double learning_rate = 1e-2;  ///< lr, in parameter units per step, > 0
  double beta1 = 0.9;           ///< first-moment decay, in [0, 1)
  double beta2 = 0.999;         ///< second-moment decay, in [0, 1)
  double epsilon = 1e-8;        ///< added to sqrt(v), > 0
  double weight_decay = 0.0;    ///< decoupled decay per step (times lr), >= 0
  /// Linear decay of lr over this many steps (0 = constant lr), to
  /// final_lr_fraction × lr, then constant.
  std::uint64_t decay_steps = 0;
  double final_lr_fraction = 0.0;  ///< in [0, 1]

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

class AdamW {
 public:
  AdamW(std::size_t parameters, AdamWOptions options);

  /// One update. Errors: invalid_argument (lengths differ from the state).
  Status step(std::span<float> params, std::span<const float> grad);
  std::uint64_t steps() const { return inner_.steps(); }

 private:
  AdamWOptions options_;
  inner::cpu::AdamW inner_;
};

}  // namespace geoloco::outer::sim
