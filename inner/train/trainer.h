// One worker's inner trainer: a model, its data streams, AdamW, and the
// site's collective. step() is one data-parallel optimizer step:
//
//   for each micro-batch k:  g_k = ∇ loss(batch from stream (site, rank, k))
//   g = Σ_k g_k (in k order);  g = Σ_ranks g (rank order, the collective)
//   g ← g / (ranks · micro_batches);  clip ‖g‖;  AdamW(θ, g, lr(step))
//
// Because the streams are numbered (site, rank, k) into one shard index and
// every sum runs in a fixed order, W workers × 1 micro-batch and 1 worker ×
// W micro-batches compute the same bits (tests/data_parallel_test.cpp).
//
// The parameters may live in memory the caller owns (the daemon's shared
// memory segment, DESIGN §3): pass it as `param_storage`.
//
// A trainer (re)started in the middle of a run calls resume_at(s) before its
// first step: the schedule and every data stream then stand where an
// uninterrupted trainer stands after s steps (the streams are replayed, which
// costs a few ns per item and no model work). The optimizer's moments are the
// caller's business (optimizer().restore(), inner_state.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "inner/collective/collective.h"
#include "inner/cpu/adamw.h"
#include "inner/data/sampler.h"
#include "inner/train/train_options.h"

namespace geoloco::inner {

/// What one optimizer step did (the same on every rank).
struct StepStats {
  std::uint64_t step = 0;       ///< 0-based index of the step just taken
  double loss = 0.0;            ///< mean training loss over all micro-batches and ranks
  double grad_norm = 0.0;       ///< global norm before clipping
  double lr = 0.0;              ///< learning rate used
  std::uint64_t work_units = 0; ///< samples or tokens of the step, over all ranks
};

class Trainer {
 public:
  /// Builds the model and one sampler per micro-batch, and the optimizer.
  /// When `param_storage` is empty the trainer allocates the parameters;
  /// otherwise it must hold layout().total() floats and is used in place.
  /// With `initialize`, rank 0 initializes from the seed and broadcasts;
  /// without, the storage already holds the parameters (an anchor), or,
  /// when the trainer allocates them, they are zero until the caller fills
  /// them (e.g. by broadcasting rank 0's anchor).
  /// Errors: invalid_argument (options, storage size), and the collective's.
  static Result<std::unique_ptr<Trainer>> create(const TrainOptions& options, Collective& collective,
                                                 std::shared_ptr<const Dataset> dataset,
                                                 std::span<float> param_storage = {}, bool initialize = true);

  const ParamLayout& layout() const { return model_->layout(); }
  Model& model() { return *model_; }
  const TrainOptions& options() const { return options_; }
  Collective& collective() { return collective_; }
  std::span<float> params() { return params_; }
  std::span<const float> grads() const { return grads_; }
  std::uint64_t steps_done() const { return step_; }
  const Dataset& dataset() const { return *dataset_; }
  cpu::AdamW& optimizer() { return *adamw_; }
  const cpu::AdamW& optimizer() const { return *adamw_; }

  /// Moves the schedule and the data streams forward to `step` (the number
  /// of steps an uninterrupted run would have taken), without training.
  /// Errors: invalid_argument when `step` is behind steps_done().
  Status resume_at(std::uint64_t step);

  /// One optimizer step. Errors: the model's, the collective's, non_finite
  /// (the gradient norm is NaN/Inf: nothing is applied).
  Result<StepStats> step();

  /// Loss (and accuracy) over the evaluation items, in eval_batch chunks.
  Result<EvalResult> evaluate();

 private:
  Trainer(const TrainOptions& options, Collective& collective, std::shared_ptr<const Dataset> dataset,
          std::unique_ptr<Model> model);

  TrainOptions options_;
  Collective& collective_;
  std::shared_ptr<const Dataset> dataset_;
  std::unique_ptr<Model> model_;
  std::vector<Sampler> samplers_;  // one per micro-batch
  std::vector<float> owned_params_;
  std::span<float> params_;
  std::vector<float> grads_;
  std::vector<float> micro_grads_;
  std::unique_ptr<cpu::AdamW> adamw_;
  Batch batch_;
  std::vector<std::size_t> items_;
  std::uint64_t step_ = 0;
};

}  // namespace geoloco::inner
