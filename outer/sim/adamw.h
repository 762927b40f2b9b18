// AdamW (Loshchilov & Hutter), the default inner optimizer (DESIGN §1 step 1),
// written to be read: fp32 state, one loop, bias corrections from β^t kept
// by repeated multiplication so every machine computes the same bits.
//
//   m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²
//   θ ← θ − lr_t · (m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + ε) − lr_t · wd · θ
//
// with lr_t optionally decaying linearly (no libm calls: the same bits everywhere).
#pragma once

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
  std::uint64_t steps() const { return t_; }

 private:
  AdamWOptions options_;
  std::vector<float> m_;
  std::vector<float> v_;
  std::uint64_t t_ = 0;
  double beta1_t_ = 1.0;  // β1^t
  double beta2_t_ = 1.0;  // β2^t
};

}  // namespace geoloco::outer::sim
