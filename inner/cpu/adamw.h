// AdamW (Loshchilov & Hutter), the inner optimizer, CPU reference written to
// be read. PyTorch's order of operations, so a user can compare:
//
//   m ← β1 m + (1 − β1) g;   v ← β2 v + (1 − β2) g²
//   θ ← θ · (1 − lr·wd) − lr · (m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + ε)
//
// β^t is kept by repeated multiplication (no pow), so every rank of a site
// computes the same bits. The learning rate is passed per step: the schedule
// (optim/schedule.h) lives outside. Weight decay applies only to the ranges
// the caller names (by convention matrices, not biases, gains or positions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"

namespace geoloco::inner::cpu {

struct AdamWOptions {
  double beta1 = 0.9;         ///< first-moment decay, in [0, 1)
  double beta2 = 0.95;        ///< second-moment decay, in [0, 1)
  double epsilon = 1e-8;      ///< added to sqrt(v̂), > 0
  double weight_decay = 0.1;  ///< decoupled, per unit of lr, >= 0

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

class AdamW {
 public:
  /// State for `parameters` values; `decay_ranges` are [begin, end) offsets
  /// that get weight decay (empty = none).
  AdamW(std::size_t parameters, AdamWOptions options,
        std::vector<std::pair<std::size_t, std::size_t>> decay_ranges = {});

  /// One update with learning rate `lr`. Errors: invalid_argument (sizes).
  Status step(std::span<float> params, std::span<const float> grads, double lr);

  std::uint64_t steps() const { return t_; }
  std::span<const float> first_moment() const { return m_; }
  std::span<const float> second_moment() const { return v_; }

  /// Takes over the state of an AdamW of the same size that took `steps`
  /// updates and held moments `m` and `v` (first_moment(), second_moment()
  /// and steps() of the saved one): the next step() computes the same bits
  /// it would have (β^t is rebuilt by the same repeated multiplication).
  /// Used by a restarted trainer (inner/train/inner_state.h).
  /// Errors: invalid_argument (sizes).
  Status restore(std::span<const float> m, std::span<const float> v, std::uint64_t steps);

 private:
  AdamWOptions options_;
  std::vector<float> m_;
  std::vector<float> v_;
  std::vector<std::uint8_t> decay_;  // 1 where weight decay applies
  std::uint64_t t_ = 0;
  double beta1_t_ = 1.0;
  double beta2_t_ = 1.0;
};

}  // namespace geoloco::inner::cpu
