// Which training items a data stream reads, deterministically from a seed.
//
// The items are cut into `shards` disjoint ranges; shard s reads only its
// range, so sites, workers and micro-batches never read each other's data.
// How the ranges lie over the data is the split:
//   contiguous   shard s reads items [n·s/S, n·(s+1)/S): each site its own
//                part of the data (different books of the text: non-i.i.d.)
//   interleaved  the items are first put in the order p -> (a·p) mod n, with
//                a the integer nearest n/φ that is coprime to n, and that
//                order is cut into ranges: each shard's items then lie evenly
//                spread over the whole data (every site sees the same mix:
//                i.i.d. shards), still disjoint, in integer arithmetic only.
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
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "inner/rng.h"

namespace geoloco::inner {

enum class DataSplit { contiguous, interleaved };

/// "contiguous" | "interleaved"; nullopt for anything else.
std::optional<DataSplit> parse_data_split(std::string_view name);
const char* data_split_name(DataSplit split);

class Sampler {
 public:
  /// Errors: invalid_argument when shard >= shards, the shard is empty, or
  /// an interleaved split has 2^32 items or more.
  static Result<Sampler> create(std::size_t items, std::size_t shard, std::size_t shards, std::uint64_t seed,
                                bool epochs, DataSplit split = DataSplit::contiguous);

  /// Appends the next n item numbers to `out` (cleared first).
  void next(std::size_t n, std::vector<std::size_t>& out);

  /// The shard's range of positions in the split's order (for contiguous,
  /// positions are item numbers).
  std::size_t begin() const { return begin_; }
  std::size_t end() const { return end_; }
  std::uint64_t epoch() const { return epoch_; }

 private:
  Sampler(std::size_t begin, std::size_t end, std::size_t shard, std::uint64_t seed, bool epochs, std::size_t items,
          std::uint64_t stride);
  void shuffle();
  std::size_t item(std::size_t position) const;

  std::size_t begin_, end_, shard_;
  std::size_t items_;
  std::uint64_t stride_;  // 0: contiguous (the position is the item); else a of the interleaved order
  std::uint64_t seed_;
  bool epochs_;
  Rng uniform_;
  std::vector<std::uint32_t> order_;  // current epoch's permutation (offsets in the range)
  std::size_t cursor_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace geoloco::inner
