// The options of one inner training run: which model, which data, how big a
// batch, which optimizer settings. One struct, every field with a default
// and its unit in the comment; validate() refuses bad values naming the
// rule. The CLI (main.cpp) and, later, the job file only fill it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "inner/cpu/adamw.h"
#include "inner/data/dataset.h"
#include "inner/data/sampler.h"
#include "inner/models/gpt.h"
#include "inner/models/mlp.h"
#include "inner/optim/schedule.h"

namespace geoloco::inner {

struct DataOptions {
  std::string fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";  ///< for mlp
  std::string cache_dir;                    ///< mlp: decompressed images kept here for the next start (empty: none)
  std::string text_path;                    ///< for gpt; empty = run `bible` (package bible-kjv)
  double heldout_fraction = 0.05;           ///< gpt: tail of the text held out for evaluation, in (0, 1)
  std::size_t eval_limit = 0;               ///< evaluation items kept (images or windows), 0 = all
  std::size_t site_shard = 0;               ///< this site's shard of the training data, < site_shards
  std::size_t site_shards = 1;              ///< sites sharing the data, >= 1
  DataSplit split = DataSplit::contiguous;  ///< how shards lie over the data (inner/data/sampler.h)
};

struct TrainOptions {
  std::string model = "mlp";  ///< "mlp" or "gpt"
  MlpOptions mlp;
  GptOptions gpt;
  DataOptions data;

  std::size_t batch = 64;         ///< samples per micro-batch per worker, >= 1
  std::size_t micro_batches = 1;  ///< gradient accumulation per step, >= 1
  std::uint64_t steps = 200;      ///< optimizer steps of run_training()
  ScheduleOptions schedule{1e-3, 20, 0, 0.1};
  cpu::AdamWOptions adamw;
  double clip_norm = 1.0;        ///< global gradient-norm bound, 0 = no clipping
  std::uint64_t seed = 1;        ///< initialization and data order
  std::uint64_t eval_every = 0;  ///< steps between evaluations, 0 = only at the end
  std::size_t eval_batch = 500;  ///< evaluation items per forward pass, >= 1

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

/// The model the options name. Errors: invalid_argument.
Result<std::unique_ptr<Model>> make_model(const TrainOptions& options);

/// Loads the data the model trains on (Fashion-MNIST or the text).
/// Errors: those of the loaders (io, malformed, truncated, …).
Result<std::shared_ptr<const Dataset>> load_dataset(const TrainOptions& options);

}  // namespace geoloco::inner
