#include "inner/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace geoloco::inner {

std::optional<DataSplit> parse_data_split(std::string_view name) {
  if (name == "contiguous") return DataSplit::contiguous;
  if (name == "interleaved") return DataSplit::interleaved;
  return std::nullopt;
}

const char* data_split_name(DataSplit split) { return split == DataSplit::interleaved ? "interleaved" : "contiguous"; }

namespace {

// a of the interleaved order: nearest n/φ (2654435769 / 2^32 is 1/φ to 10
// digits), moved up to the next value coprime to n so p -> a·p mod n is a
// bijection (n - 1 always is, so a stays below n). n < 2^32, so
// n · 2654435769 fits 64 bits.
std::uint64_t interleave_stride(std::uint64_t n) {
  if (n <= 1) return 1;
  std::uint64_t a = std::max<std::uint64_t>((n * 2654435769ull + (1ull << 31)) >> 32, 1);
  while (std::gcd(a, n) != 1) ++a;
  return a;
}

}  // namespace

Result<Sampler> Sampler::create(std::size_t items, std::size_t shard, std::size_t shards, std::uint64_t seed,
                                bool epochs, DataSplit split) {
  GEOLOCO_RETURN_IF(shards == 0 || shard >= shards, Err::invalid_argument, "sampler: shard ", shard,
                    " is not below the shard count ", shards);
  const std::size_t begin = items * shard / shards;
  const std::size_t end = items * (shard + 1) / shards;
  GEOLOCO_RETURN_IF(begin == end, Err::invalid_argument, "sampler: ", items, " items cut into ", shards,
                    " shards leave shard ", shard, " empty");
  GEOLOCO_RETURN_IF(epochs && end - begin > 0xffffffffu, Err::invalid_argument, "sampler: shard of ", end - begin,
                    " items is too large to shuffle (at most 2^32 - 1)");
  GEOLOCO_RETURN_IF(split == DataSplit::interleaved && items > 0xffffffffu, Err::invalid_argument, "sampler: ", items,
                    " items are too many to interleave (at most 2^32 - 1); use the contiguous split");
  const std::uint64_t stride = split == DataSplit::interleaved ? interleave_stride(items) : 0;
  return Sampler(begin, end, shard, seed, epochs, items, stride);
}

Sampler::Sampler(std::size_t begin, std::size_t end, std::size_t shard, std::uint64_t seed, bool epochs,
                 std::size_t items, std::uint64_t stride)
    : begin_(begin),
      end_(end),
      shard_(shard),
      items_(items),
      stride_(stride),
      seed_(seed),
      epochs_(epochs),
      uniform_(seed, shard) {
  if (epochs_) shuffle();
}

std::size_t Sampler::item(std::size_t position) const {
  if (stride_ == 0) return position;
  return static_cast<std::size_t>(static_cast<std::uint64_t>(position) * stride_ % items_);
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
      out.push_back(item(begin_ + uniform_.below(end_ - begin_)));
      continue;
    }
    if (cursor_ == order_.size()) {
      ++epoch_;
      shuffle();
    }
    out.push_back(item(begin_ + order_[cursor_++]));
  }
}

}  // namespace geoloco::inner
