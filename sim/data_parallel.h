// The baseline DiLoCo is measured against: synchronous data parallelism
// across the job's sites, with the same global batch (every site's batch at
// every step) and the same inner optimizer, schedule and data. It runs the
// built-in trainer once with one micro-batch per site (bit for bit what k
// workers over an all-reduce of their gradients compute, inner/README.md),
// so it needs no network; the bytes a WAN all-reduce of the fp32 gradients
// would carry are computed: 2(k−1)/k × 4 B × parameters per site per step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "inner/train/train_command.h"

namespace geoloco::sim {

struct DataParallelOptions {
  inner::TrainCommand command;  ///< one site's trainer command (the job's); its shard is ignored
  std::uint32_t sites = 1;      ///< k
  std::uint64_t rounds = 1;     ///< periods of `steps_per_round` steps, for the report
  std::uint64_t steps_per_round = 1;
  double bandwidth_bits_per_s = 1e9;
  double rtt_ms = 100;
};

struct DataParallelRound {
  std::uint64_t round = 0;
  double eval_loss = 0;              ///< of the parameters after the round's steps
  double accuracy = -1;              ///< mlp; -1 for gpt
  std::uint64_t bytes_per_site = 0;  ///< computed: the round's gradient all-reduces
  double exchange_seconds = 0;       ///< modelled: an all-reduce per step (common/wan_model.h)
};

struct DataParallelReport {
  std::vector<DataParallelRound> rounds;
  std::uint64_t parameters = 0;
  std::string digest;  ///< of the final parameters
};

/// Errors: invalid_argument, the trainer's and the data's.
Result<DataParallelReport> run_data_parallel(const DataParallelOptions& options,
                                             const std::function<void(const DataParallelRound&)>& on_round = {});

}  // namespace geoloco::sim
