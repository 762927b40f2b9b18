// `geoloco bench step`: the two passes over the model that end each round
// in geolocod (the vote's digest of the stepped anchor, computed on copies,
// and the outer step in place with the digest after it), over an averaged
// Δ held as the all-gather's encoded chunks, on 1 thread and on more. The
// baseline is the one-thread pass measured in the same run; every thread
// count must give the same anchor digest (checked and printed).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::bench {

struct StepBenchOptions {
  std::uint64_t values = 64ull << 20;  ///< parameters (the anchor's values)
  std::vector<unsigned> threads;       ///< thread counts; empty: 1 and the daemon's default
  bool raw = false;                    ///< Δ as raw fp32 chunks instead of q8 + zstd
  int repeats = 3;                     ///< timed passes per figure; the fastest counts
  std::uint64_t seed = 1;              ///< synthetic anchor, momentum and Δ
};

struct StepBenchRow {
  unsigned threads = 1;
  double digest_seconds = 0;  ///< the vote's pass: decode, step on copies, digest
  double step_seconds = 0;    ///< the committed pass: decode, step in place, digest
  double digest_speedup = 0;  ///< the one-thread digest pass's seconds over this one's
  double step_speedup = 0;    ///< the same for the step
  double digest_gbps = 0;     ///< GB of fp32 model a second, the digest pass
  double step_gbps = 0;       ///< the same, the step
  std::string anchor_digest;  ///< of the anchor after one step
  bool same_bits = false;     ///< the one-thread digest, and the vote's digest equals the step's
};

/// Runs every thread count (1 first, as the baseline). Errors:
/// invalid_argument (fewer values than one chunk, a thread count of 0 or
/// over 256, repeats < 1), and a codec's or the step's own error (a bug).
Result<std::vector<StepBenchRow>> run_step_bench(const StepBenchOptions& options);

/// One JSON object per row and line, with the keys of StepBenchRow.
void print_step_json(const std::vector<StepBenchRow>& rows, std::ostream& out);
/// A table, with the values, the chunks and the cores of this machine.
void print_step_table(const std::vector<StepBenchRow>& rows, const StepBenchOptions& options, std::ostream& out);

}  // namespace geoloco::bench
