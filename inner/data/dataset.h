// What a model trains on: numbered training items and evaluation items,
// turned into a Batch on request. Which items a worker reads is the
// sampler's business (sampler.h), so every dataset is sharded the same way.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "inner/models/model.h"

namespace geoloco::inner {

class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Training items, numbered 0..train_items()-1.
  virtual std::size_t train_items() const = 0;
  /// Evaluation items (a held-out set, the same on every worker and site).
  virtual std::size_t eval_items() const = 0;
  /// Fills `batch` with the given training (or evaluation) items, in order.
  /// Item numbers come from the sampler and are always in range.
  virtual void train_batch(std::span<const std::size_t> items, Batch& batch) const = 0;
  virtual void eval_batch(std::span<const std::size_t> items, Batch& batch) const = 0;
  /// "fashion-mnist (60000 train, 10000 eval)", for logs.
  virtual std::string describe() const = 0;
  /// True when items should be drawn as shuffled epochs (each item once per
  /// pass); false when drawn uniformly with replacement (overlapping text
  /// windows, where an "epoch" of every offset means little).
  virtual bool epochs() const = 0;
};

}  // namespace geoloco::inner
