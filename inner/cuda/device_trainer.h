// The inner trainer on one GPU (an InnerTrainer, inner/train/inner_trainer.h):
// parameters, gradients and AdamW's moments live in device memory; the
// model's passes run on its device runner (device_model.h). It is the CPU
// Trainer's step (inner/train/trainer.cpp), line for line:
//
//   for each micro-batch k:                      the same samplers (make_worker_samplers)
//     g_k = ∇ loss(batch k)                      runner: into grads (k = 0) or micro_grads (k > 0)
//     g += g_k                                   residual_forward: the same fp32 additions, in k order
//   g = Σ_ranks g                                the collective, on device memory
//   g ← g · 1/(ranks · micro_batches)            scale(): the same fp32 multiplication
//   loss = Σ_ranks Σ_k loss_k / parts            one float through the collective, as the CPU's
//   clip ‖g‖                                     clip_global_norm (clip.cuh)
//   AdamW(θ, g, lr(step))                        cuda::AdamW: the reference's bits for the same g
//
// and evaluate() is the CPU's loop (evaluate_dataset) over the runner. So
// the device run differs from the CPU run only by rounding: cuBLAS's and
// the kernels' summation orders (bounded per op by the backend test), the
// norm's tree order, and NCCL's sum over ranks (not rank order; the same
// bits on every rank). Batches are built on the host from the same items
// and uploaded each step.
//
// Host memory: the host storage (the daemon's shared segment on rank 0, or
// a buffer the trainer owns) mirrors the device parameters only when asked
// (params_to_host / params_from_host); rank 0 does so at every sync.
//
// The collective must work on device memory: NcclCollective on the same
// Context (its stream orders the collectives after the kernels), or
// SingleCollective for one worker.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "inner/cuda/adamw.cuh"
#include "inner/cuda/device.h"
#include "inner/cuda/device_model.h"
#include "inner/data/sampler.h"
#include "inner/train/inner_trainer.h"

namespace geoloco::inner::cuda {

class DeviceTrainer final : public InnerTrainer {
 public:
  /// As Trainer::create (inner/train/trainer.h), on ctx's device: the model
  /// and its runner, the samplers, device parameters, gradients and AdamW.
  /// `host_storage` empty: the trainer owns a host buffer; else it holds
  /// layout().total() floats. With `initialize`, rank 0 initializes the
  /// host storage from the seed, and the device parameters are broadcast
  /// from rank 0; without, the host storage is uploaded as it is (the
  /// anchor on rank 0; zeros elsewhere until the caller broadcasts).
  /// `ctx` (and `collective`) must outlive the trainer.
  /// Errors: invalid_argument (options, storage size, a collective that does
  /// not work on device memory), unsupported (a model without a runner),
  /// io (device memory), the collective's.
  static Result<std::unique_ptr<DeviceTrainer>> create(Context& ctx, const TrainOptions& options,
                                                       Collective& collective, std::shared_ptr<const Dataset> dataset,
                                                       std::span<float> host_storage = {}, bool initialize = true);

  /// A TrainerFactory making device trainers on `ctx` (which must outlive them).
  static TrainerFactory factory(Context& ctx);

  std::string backend() const override { return "cuda"; }
  const TrainOptions& options() const override { return options_; }
  const ParamLayout& layout() const override { return model_->layout(); }
  const Model& model() const override { return *model_; }
  const Dataset& dataset() const override { return *dataset_; }
  Collective& collective() override { return collective_; }
  std::uint64_t steps_done() const override { return step_; }

  Status resume_at(std::uint64_t step) override;
  Result<StepStats> step() override;
  Result<EvalResult> evaluate() override;

  std::span<float> host_params() override { return host_; }
  Status params_to_host() override;
  Status params_from_host() override;
  Status broadcast_params(int root) override;

  Result<OptimizerState> optimizer_state() override;
  Status restore_optimizer(std::span<const float> m, std::span<const float> v, std::uint64_t steps) override;

  Context& context() { return ctx_; }

 private:
  DeviceTrainer(Context& ctx, const TrainOptions& options, Collective& collective,
                std::shared_ptr<const Dataset> dataset, std::unique_ptr<Model> model,
                std::unique_ptr<DeviceModel> runner);
  std::span<float> device_params() { return {params_.data(), params_.size()}; }

  Context& ctx_;
  TrainOptions options_;
  Collective& collective_;
  std::shared_ptr<const Dataset> dataset_;
  std::unique_ptr<Model> model_;         // the CPU model: layout, init, work units
  std::unique_ptr<DeviceModel> runner_;  // its passes on the device
  std::unique_ptr<AdamW> adamw_;
  std::vector<Sampler> samplers_;  // one per micro-batch
  std::vector<float> owned_host_;
  std::span<float> host_;
  DeviceBuffer<float> params_, grads_, micro_grads_;
  DeviceBuffer<float> loss_;            // the step's loss on its way through the collective
  std::vector<float> m_host_, v_host_;  // optimizer_state()'s copies
  Batch batch_;
  std::vector<std::size_t> items_;
  std::uint64_t step_ = 0;
};

}  // namespace geoloco::inner::cuda
