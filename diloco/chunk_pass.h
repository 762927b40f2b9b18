// One pass over a Δ held as chunks that decode independently of each other
// (geolocod's averaged Δ: each owner's encoded chunks), on several threads,
// with the parts whose order decides bits done in chunk order. Each thread
// takes the next chunk not yet taken, decodes it and runs `work` on it (the
// elementwise part: a step in place, a stepped copy), then waits for the
// chunks before it and runs `in_order` (the part whose order matters: a
// streaming digest, a sum of squares). So the result is bit for bit that of
// one thread going through the chunks in order, whatever the thread count.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/status.h"
#include "diloco/exchange.h"

namespace geoloco::diloco {

/// Decodes chunk `i` of Δ into `out` (sized as the chunk). A codec keeps
/// scratch, so a pass makes one decoder per thread.
using ChunkDecoder = std::function<Status(std::size_t i, std::span<float> out)>;

/// Δ as chunks: chunk i holds the values `ranges[i]` of the round's range,
/// counted from its start; the chunks come in order, each starting where
/// the one before ends, the first at 0. `decoder()` is called once by each
/// thread of a pass, from that thread.
struct ChunkList {
  std::span<const Range> ranges;
  std::function<ChunkDecoder()> decoder;
  /// The values the chunks cover (the end of the last one). Errors:
  /// invalid_argument (a chunk that does not start where the one before ends).
  Result<std::uint64_t> covered() const;
};

/// What a thread does with a decoded chunk, at the same time as other
/// threads with theirs: returns the values `in_order` receives (`values`
/// itself, or what it made of them in `scratch`, a buffer of the thread's).
using ChunkWork = std::function<Result<std::span<const float>>(std::size_t i, std::uint64_t begin,
                                                               std::span<float> values, std::vector<float>& scratch)>;
/// Called for chunk after chunk in order, one at a time.
using ChunkInOrder = std::function<Status(std::size_t i, std::uint64_t begin, std::span<const float> values)>;

/// The threads a pass runs on: `count`, the caller's among them (at most
/// one a chunk). The CPU the others use is added to `helper_cpu_seconds`
/// when set (a stage timed on the caller's thread clock misses it). Once
/// `*cancel` is true (set from any thread), the chunks not yet begun are
/// not decoded and the pass ends with an io error.
struct PassThreads {
  PassThreads(unsigned n = 1, double* cpu = nullptr, const std::atomic<bool>* stop = nullptr)
      : count(n), helper_cpu_seconds(cpu), cancel(stop) {}
  unsigned count;
  double* helper_cpu_seconds;
  const std::atomic<bool>* cancel;
};

/// Runs the pass on `threads`. `work` may be empty (the decoded values go to `in_order`), as
/// may `in_order`. Stops at the first error in chunk order and returns it:
/// the same error whatever the thread count. Chunks after the failing one
/// may have had their `work` done already (a step in place: the values
/// after a failure are no round's). Errors: the decoder's, work's,
/// in_order's; internal (out of memory on a thread).
Status run_chunk_pass(const ChunkList& delta, const PassThreads& threads, const ChunkWork& work,
                      const ChunkInOrder& in_order);

/// The threads a pass over the model runs on when the site does not say:
/// one per core, at most 8 (the passes are bound by memory bandwidth, which
/// a few cores fill).
unsigned default_pass_threads();

}  // namespace geoloco::diloco
