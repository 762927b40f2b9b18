// One worker's inner trainer on the CPU (the reference InnerTrainer,
// inner_trainer.h): a model, its data streams, AdamW, and the site's
// collective. step() is one data-parallel optimizer step:
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
// memory segment, docs/design.md §3): pass it as `param_storage`. The trainer trains
// in that memory, so it is also its host_params() and the copies the
// interface asks for (params_to_host, params_from_host) are no-ops.
//
// A trainer (re)started in the middle of a run calls resume_at(s) before its
// first step: the schedule and every data stream then stand where an
// uninterrupted trainer stands after s steps (the streams are replayed, which
// costs a few ns per item and no model work). The optimizer's moments are the
// caller's business (optimizer().restore(), inner_state.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "inner/collective/collective.h"
#include "inner/cpu/adamw.h"
#include "inner/data/sampler.h"
#include "inner/train/inner_trainer.h"
#include "inner/train/train_options.h"

namespace geoloco::inner {

/// The data streams of one worker, one per micro-batch: stream (site, rank,
/// k) reads shard ((site · ranks) + rank) · K + k of sites · ranks · K
/// contiguous shards of the training items. Every backend's trainer takes
/// its streams from here, so all read the same items in the same order.
/// Errors: the sampler's (invalid_argument).
Result<std::vector<Sampler>> make_worker_samplers(const TrainOptions& options, const Dataset& dataset,
                                                  const Collective& collective);

/// The evaluation of every backend: the evaluation items in eval_batch
/// chunks, in order, `evaluate_batch` on each, the mean loss weighted by
/// each chunk's predictions. Errors: invalid_argument (no evaluation
/// items), evaluate_batch's.
Result<EvalResult> evaluate_dataset(const Dataset& dataset, std::size_t eval_batch,
                                    const std::function<Result<EvalResult>(const Batch&)>& evaluate_batch);

class Trainer final : public InnerTrainer {
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

  /// A TrainerFactory (inner_trainer.h) making this CPU trainer.
  static TrainerFactory factory();

  std::string backend() const override { return "cpu"; }
  const ParamLayout& layout() const override { return model_->layout(); }
  Model& model() { return *model_; }
  const Model& model() const override { return *model_; }
  const TrainOptions& options() const override { return options_; }
  Collective& collective() override { return collective_; }
  std::span<float> params() { return params_; }
  std::span<const float> grads() const { return grads_; }
  std::uint64_t steps_done() const override { return step_; }
  const Dataset& dataset() const override { return *dataset_; }
  cpu::AdamW& optimizer() { return *adamw_; }
  const cpu::AdamW& optimizer() const { return *adamw_; }

  Status resume_at(std::uint64_t step) override;
  Result<StepStats> step() override;
  Result<EvalResult> evaluate() override;

  /// The parameters themselves: this trainer trains in host memory.
  std::span<float> host_params() override { return params_; }
  Status params_to_host() override { return {}; }
  Status params_from_host() override { return {}; }
  Status broadcast_params(int root) override { return collective_.broadcast(params_, root); }
  Result<OptimizerState> optimizer_state() override {
    return OptimizerState{adamw_->steps(), adamw_->first_moment(), adamw_->second_moment()};
  }
  Status restore_optimizer(std::span<const float> m, std::span<const float> v, std::uint64_t steps) override {
    return adamw_->restore(m, v, steps);
  }

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
