// Which training items a data stream reads, deterministically from a seed.
//
// The items are cut into `shards` contiguous ranges; shard s reads only its
// range, so sites, workers and micro-batches never read each other's data.
// The trainer numbers its streams (site, rank, micro-batch) into one shard
// index: that is why W workers with 1 micro-batch each and 1 worker with W
// micro-batches read exactly the same samples.
//
// Within its range a sampler either walks shuffled epochs (every item once
// per pass; the permutation of epoch e comes from (seed, shard, e)) or draws
// uniformly with replacement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "inner/rng.h"

namespace geoloco::inner {

class Sampler {
 public:
  /// Errors: invalid_argument when shard >= shards or the shard is empty.
  static Result<Sampler> create(std::size_t items, std::size_t shard, std::size_t shards, std::uint64_t seed,
                                bool epochs);

  /// Appends the next n item numbers to `out` (cleared first).
  void next(std::size_t n, std::vector<std::size_t>& out);

  std::size_t begin() const { return begin_; }
  std::size_t end() const { return end_; }
  std::uint64_t epoch() const { return epoch_; }

 private:
  Sampler(std::size_t begin, std::size_t end, std::size_t shard, std::uint64_t seed, bool epochs);
  void shuffle();

  std::size_t begin_, end_, shard_;
  std::uint64_t seed_;
  bool epochs_;
  Rng uniform_;
  std::vector<std::uint32_t> order_;  // current epoch's permutation (offsets in the range)
  std::size_t cursor_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace geoloco::inner
