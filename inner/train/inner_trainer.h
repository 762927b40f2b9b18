// What run_training() and SyncedTraining drive: one worker's inner trainer,
// whatever backend computes its steps. Two implementations:
//   Trainer             (train/trainer.h)          the CPU reference; parameters in host memory
//   cuda::DeviceTrainer (cuda/device_trainer.h)    parameters, gradients and AdamW moments on a GPU
// Both take the same TrainOptions, read the same data streams in the same
// order, and apply the same step (micro-batch sum, all-reduce, average,
// clip, AdamW), so a run on one backend is the other's within rounding.
//
// The host side of the parameters. The daemon (docs/design.md §3) reads and writes
// parameters in host memory, its shared segment; a trainer is given that
// span as its `host storage` and exposes it as host_params(). The CPU
// trainer trains in it directly, so params_to_host() and params_from_host()
// do nothing there; the device trainer copies (device → host before the
// daemon reads, host → device after it wrote the anchor). broadcast_params()
// broadcasts the TRAINING parameters (device memory on the GPU) over the
// trainer's collective.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "inner/collective/collective.h"
#include "inner/data/dataset.h"
#include "inner/train/train_options.h"

namespace geoloco::inner {

/// What one optimizer step did (the same on every rank).
struct StepStats {
  std::uint64_t step = 0;        ///< 0-based index of the step just taken
  double loss = 0.0;             ///< mean training loss over all micro-batches and ranks
  double grad_norm = 0.0;        ///< global norm before clipping
  double lr = 0.0;               ///< learning rate used
  std::uint64_t work_units = 0;  ///< samples or tokens of the step, over all ranks
};

/// AdamW's state as the host sees it (inner_state.h saves it). The spans
/// stay valid until the trainer's next call.
struct OptimizerState {
  std::uint64_t steps = 0;
  std::span<const float> m, v;
};

class InnerTrainer {
 public:
  virtual ~InnerTrainer() = default;

  /// "cpu" or "cuda".
  virtual std::string backend() const = 0;
  virtual const TrainOptions& options() const = 0;
  virtual const ParamLayout& layout() const = 0;
  /// The model's host description (name, work units, FLOPs); on the GPU the
  /// CPU model the device runner mirrors.
  virtual const Model& model() const = 0;
  virtual const Dataset& dataset() const = 0;
  virtual Collective& collective() = 0;
  virtual std::uint64_t steps_done() const = 0;

  /// Moves the schedule and the data streams forward to `step` (the number
  /// of steps an uninterrupted run would have taken), without training.
  /// Errors: invalid_argument when `step` is behind steps_done().
  virtual Status resume_at(std::uint64_t step) = 0;

  /// One optimizer step. Errors: the model's, the collective's, non_finite
  /// (the gradient norm is NaN/Inf: nothing is applied).
  virtual Result<StepStats> step() = 0;

  /// Loss (and accuracy) over the evaluation items, in eval_batch chunks.
  virtual Result<EvalResult> evaluate() = 0;

  /// The host storage (see the file comment): layout().total() floats.
  virtual std::span<float> host_params() = 0;
  /// Makes host_params() hold the training parameters. Errors: io (device).
  virtual Status params_to_host() = 0;
  /// Makes host_params() the training parameters. Errors: io (device).
  virtual Status params_from_host() = 0;
  /// Every rank gets rank `root`'s training parameters (the collective's).
  virtual Status broadcast_params(int root) = 0;

  /// AdamW's step count and moments (copied to the host on the GPU).
  /// Errors: io (device).
  virtual Result<OptimizerState> optimizer_state() = 0;
  /// Takes over a saved AdamW state (cpu::AdamW::restore's meaning).
  /// Errors: invalid_argument (sizes), io (device).
  virtual Status restore_optimizer(std::span<const float> m, std::span<const float> v, std::uint64_t steps) = 0;
};

/// Makes a trainer of some backend: `host_storage` empty (the trainer owns
/// its host buffer) or layout().total() floats used in place, and
/// `initialize` as Trainer::create (trainer.h) documents.
using TrainerFactory = std::function<Result<std::unique_ptr<InnerTrainer>>(
    const TrainOptions& options, Collective& collective, std::shared_ptr<const Dataset> dataset,
    std::span<float> host_storage, bool initialize)>;

}  // namespace geoloco::inner
