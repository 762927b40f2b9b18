// The seam between the outer engine and whatever trains a site's replica
// (DESIGN §2's built-in trainer or an external one). The simulator drives N
// of these; the neural trainers of later issues implement the same interface.
//
// A trainer owns a flat fp32 replica laid out as layout() says, its inner
// optimizer state (which stays on the site across rounds), and its data
// shard. It knows nothing about sites, rounds or compression.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "outer/layout.h"

namespace geoloco::outer::sim {

/// What one minibatch gave.
struct StepResult {
  double loss = 0.0;         ///< the minibatch's loss before the update
  std::uint64_t tokens = 0;  ///< samples (tokens) processed
};

class Trainer {
 public:
  virtual ~Trainer() = default;

  /// The tensors of the flat replica, in order.
  virtual const std::vector<TensorInfo>& layout() const = 0;
  /// The replica; the outer engine reads it (pseudo-gradient) and writes it
  /// (the new anchor, or a merge).
  virtual std::span<float> parameters() = 0;
  /// The gradient of the next minibatch's loss at the current replica, into
  /// `grad` (one per parameter); advances the data cursor, changes nothing
  /// else. Data-parallel training averages these across sites.
  virtual Result<StepResult> gradient(std::span<float> grad) = 0;
  /// One inner-optimizer update of the replica with `grad`.
  virtual Status apply(std::span<const float> grad) = 0;
  /// One inner step: gradient() then apply().
  virtual Result<StepResult> step() = 0;
  /// The loss of `params` on the evaluation set, which is the same on every
  /// site so that runs can be compared.
  virtual Result<double> evaluate(std::span<const float> params) = 0;
};

/// Makes the trainer of site `site` of `sites`.
using TrainerFactory = std::function<Result<std::unique_ptr<Trainer>>(std::uint32_t site, std::uint32_t sites)>;

}  // namespace geoloco::outer::sim
