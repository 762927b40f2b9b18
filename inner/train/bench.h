// `geoloco-train --bench`: training throughput of each model on the CPU
// backend, next to what OpenBLAS achieves on a plain sgemm of the model's
// largest matrix product in the same run. The ratio says how much of the
// machine the reference implementation uses (the rest goes to the loops
// written to be read: layernorm, softmax, GELU, AdamW).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "inner/models/model.h"
#include "inner/train/train_options.h"

namespace geoloco::inner {

struct BenchOptions {
  double seconds_per_model = 10.0;  ///< timed training per model, > 0
  double peak_seconds = 2.0;        ///< timed sgemm per model, > 0
  int threads = 1;                  ///< OpenBLAS threads, >= 1
  TrainOptions mlp;                 ///< model "mlp" and its batch
  TrainOptions gpt;                 ///< model "gpt" and its batch

  BenchOptions();
  Status validate() const;
};

struct BenchResult {
  std::string model;
  std::string unit;  ///< "samples" or "tokens"
  std::size_t params = 0;
  std::size_t batch = 0;
  std::uint64_t steps = 0;
  double units_per_second = 0.0;
  double gflops = 0.0;       ///< model FLOPs of training per second / 1e9
  double peak_gflops = 0.0;  ///< plain sgemm of peak_shape
  GemmShape peak_shape;
  double final_loss = 0.0;
};

/// GFLOP/s of sgemm on m×k · k×n over about `seconds`.
double measure_sgemm_gflops(const GemmShape& shape, double seconds);

/// Benchmarks mlp then gpt, printing a line per model to `out` as it goes.
/// Errors: those of loading the data and training.
Result<std::vector<BenchResult>> run_bench(const BenchOptions& options, std::ostream& out);

}  // namespace geoloco::inner
