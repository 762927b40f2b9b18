#include "inner/data/sampler.h"

#include <numeric>
#include <utility>

namespace geoloco::inner {

Result<Sampler> Sampler::create(std::size_t items, std::size_t shard, std::size_t shards, std::uint64_t seed,
                                bool epochs) {
  GEOLOCO_RETURN_IF(shards == 0 || shard >= shards, Err::invalid_argument, "sampler: shard ", shard,
                    " is not below the shard count ", shards);
  const std::size_t begin = items * shard / shards;
  const std::size_t end = items * (shard + 1) / shards;
  GEOLOCO_RETURN_IF(begin == end, Err::invalid_argument, "sampler: ", items, " items cut into ", shards,
                    " shards leave shard ", shard, " empty");
  GEOLOCO_RETURN_IF(epochs && end - begin > 0xffffffffu, Err::invalid_argument, "sampler: shard of ", end - begin,
                    " items is too large to shuffle (at most 2^32 - 1)");
  return Sampler(begin, end, shard, seed, epochs);
}

Sampler::Sampler(std::size_t begin, std::size_t end, std::size_t shard, std::uint64_t seed, bool epochs)
    : begin_(begin), end_(end), shard_(shard), seed_(seed), epochs_(epochs), uniform_(seed, shard) {
  if (epochs_) shuffle();
}

void Sampler::shuffle() {
  order_.resize(end_ - begin_);
  std::iota(order_.begin(), order_.end(), 0u);
  // Fisher–Yates from our own generator: std::shuffle's result differs
  // between standard libraries.
  Rng rng(seed_ ^ (epoch_ * 0x9e3779b97f4a7c15ull), shard_);
  for (std::size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.below(i)]);
  cursor_ = 0;
}

void Sampler::next(std::size_t n, std::vector<std::size_t>& out) {
  out.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (!epochs_) {
      out.push_back(begin_ + uniform_.below(end_ - begin_));
      continue;
    }
    if (cursor_ == order_.size()) {
      ++epoch_;
      shuffle();
    }
    out.push_back(begin_ + order_[cursor_++]);
  }
}

}  // namespace geoloco::inner
