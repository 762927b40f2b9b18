// The interface every built-in model implements, on every backend.
//
// A model does NOT own its parameters: it reads them from, and writes
// gradients into, flat fp32 buffers laid out by layout(). That is what lets
// the trainer hand the daemon one shared-memory span (docs/design.md §3) and lets
// data parallelism all-reduce one contiguous gradient. A model owns only its
// activation scratch, so one instance is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "inner/layout.h"

namespace geoloco::inner {

/// A minibatch. Which fields a model reads is part of its documentation:
/// the classifier reads `features` and `targets` (one label per sample);
/// the language model reads `tokens` and `targets` (one next token per
/// position, samples × context each).
struct Batch {
  std::size_t samples = 0;
  std::vector<float> features;
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> targets;
};

/// What evaluation measured over one batch.
struct EvalResult {
  double loss = 0.0;            ///< mean cross-entropy (nats) over the predictions
  std::size_t correct = 0;      ///< predictions whose argmax is the target
  std::size_t predictions = 0;  ///< samples (classifier) or tokens (language model)
};

/// One matrix product's size, m×k times k×n.
struct GemmShape {
  std::size_t m = 0, k = 0, n = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  /// "mlp", "gpt".
  virtual std::string name() const = 0;
  virtual const ParamLayout& layout() const = 0;

  /// Fills `params` (layout().total() values) deterministically from `seed`.
  virtual void init(std::span<float> params, std::uint64_t seed) const = 0;

  /// Mean loss of `batch` at `params`; OVERWRITES `grads` with its gradient
  /// (so micro-batch and data-parallel sums start from the same bits).
  /// Errors: invalid_argument (buffer sizes, a batch of the wrong shape, a
  /// label or token out of range).
  virtual Result<double> forward_backward(std::span<const float> params, const Batch& batch,
                                          std::span<float> grads) = 0;

  /// Loss (and argmax accuracy) of `batch` at `params`, forward only.
  virtual Result<EvalResult> evaluate(std::span<const float> params, const Batch& batch) = 0;

  /// The units a user counts throughput in: samples (mlp) or tokens (gpt).
  virtual std::size_t work_units(const Batch& batch) const = 0;
  virtual std::string work_unit_name() const = 0;
  /// Floating-point operations of one forward_backward on `samples` samples
  /// (matrix products and attention, 2 per multiply-add; the backward pass
  /// counted as twice the forward).
  virtual double train_flops(std::size_t samples) const = 0;
  /// The largest matrix product of a training step on `samples` samples: the
  /// benchmark times a plain sgemm of this size as the achievable peak.
  virtual GemmShape largest_gemm(std::size_t samples) const = 0;

  /// Offset ranges that get weight decay: the weight matrices. Biases,
  /// layernorm gains and position tables are not decayed.
  virtual std::vector<std::pair<std::size_t, std::size_t>> decay_ranges() const = 0;
};

}  // namespace geoloco::inner
