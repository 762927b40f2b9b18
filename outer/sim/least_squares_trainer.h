// A small exact trainer: linear least squares, y = x·w + b + noise, trained
// with AdamW on minibatches drawn from the site's own shard. Plain C++, no
// BLAS, deterministic from its seed, so the outer engine can be tested end to
// end today and a whole DiLoCo run is reproducible bit for bit.
//
// The weight vector is split into `tensors` tensors ("w.0", "w.1", …) plus a
// scalar "bias", so streaming fragments have tensor boundaries to respect.
// Loss: mean over the batch of ½ (x·w + b − y)²; its floor on the
// evaluation set is about ½ noise².
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "outer/sim/adamw.h"
#include "outer/sim/rng.h"
#include "outer/sim/trainer.h"

namespace geoloco::outer::sim {

struct LeastSquaresOptions {
  std::uint32_t features = 64;        ///< length of x (and w), >= 1
  std::uint32_t tensors = 4;          ///< tensors w is split into, 1..features
  std::uint32_t samples_per_site = 2048;  ///< shard size, >= batch
  std::uint32_t batch = 16;           ///< samples (tokens) per inner step, >= 1
  std::uint32_t eval_samples = 4096;  ///< held-out set, the same on every site, >= 1
  double noise = 0.1;                 ///< standard deviation of the label noise, >= 0
  double target_mean = 0.0;           ///< true weights are mean + spread·U(−1, 1)
  double target_spread = 1.0;         ///< (see target_mean), >= 0
  double init_value = 0.0;            ///< every parameter's initial value
  /// Every site draws the same shard and minibatches (for equivalence tests).
  bool same_data_on_every_site = false;
  std::uint64_t seed = 1;             ///< the task (true weights, eval set) and the shards derive from it
  AdamWOptions adamw;                 ///< the inner optimizer

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

class LeastSquaresTrainer : public Trainer {
 public:
  /// Site `site`'s trainer. Errors: invalid_argument (options).
  static Result<std::unique_ptr<LeastSquaresTrainer>> create(const LeastSquaresOptions& options, std::uint32_t site);

  const std::vector<TensorInfo>& layout() const override { return layout_; }
  std::span<float> parameters() override { return params_; }
  Result<StepResult> gradient(std::span<float> grad) override;
  Status apply(std::span<const float> grad) override;
  Result<StepResult> step() override;
  Result<double> evaluate(std::span<const float> params) override;

 private:
  LeastSquaresTrainer(const LeastSquaresOptions& options, std::uint32_t site);
  double loss_on(const std::vector<float>& x, const std::vector<float>& y, std::span<const float> params) const;

  LeastSquaresOptions options_;
  std::vector<TensorInfo> layout_;
  std::vector<float> params_;   // w (features values), then b
  std::vector<float> shard_x_;  // samples_per_site × features
  std::vector<float> shard_y_;
  std::vector<float> eval_x_;
  std::vector<float> eval_y_;
  std::unique_ptr<Rng> batch_rng_;
  AdamW adamw_;
  std::vector<float> grad_;
};

/// A TrainerFactory making LeastSquaresTrainers.
TrainerFactory least_squares_factory(LeastSquaresOptions options);

}  // namespace geoloco::outer::sim
