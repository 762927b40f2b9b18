#include "diloco/exchange.h"

#include <algorithm>

#include "common/mix.h"

namespace geoloco::diloco {

Range shard_range(std::uint64_t n, std::size_t parts, std::size_t j) {
  const std::uint64_t begin = n * j / parts;
  const std::uint64_t end = n * (j + 1) / parts;
  return {begin, end - begin};
}

Range chunk_range(Range shard, std::uint64_t c, std::uint64_t chunk) {
  const std::uint64_t begin = c * chunk;
  return {shard.begin + begin, std::min(chunk, shard.size - begin)};
}

std::uint64_t chunks_in(Range shard, std::uint64_t chunk) { return (shard.size + chunk - 1) / chunk; }

std::uint64_t encode_seed(std::uint64_t seed, std::uint64_t round, std::uint64_t attempt, std::size_t site,
                          std::size_t shard, std::uint64_t c, int phase) {
  return mix64(seed ^ mix64(round * 0x100000001b3ull + attempt) ^
               mix64((site << 40) ^ (shard << 20) ^ (c << 2) ^ static_cast<std::uint64_t>(phase)));
}

std::span<const float> contribution(std::span<const float> input, std::span<const float> base, Range range,
                                    std::vector<float>& scratch) {
  auto values = input.subspan(range.begin, range.size);
  if (base.empty()) return values;
  scratch.resize(range.size);
  const auto b = base.subspan(range.begin, range.size);
  for (std::size_t i = 0; i < range.size; ++i) scratch[i] = b[i] - values[i];
  return scratch;
}

double allreduce_bytes_per_site(double bytes, std::size_t parts) {
  if (parts < 2) return 0;
  const double n = static_cast<double>(parts);
  return 2.0 * (n - 1) / n * bytes;
}

std::vector<float> normalized_weights(std::span<const double> weights) {
  double total = 0;
  for (double w : weights) total += w;
  std::vector<float> out;
  for (double w : weights) out.push_back(static_cast<float>(w / total));
  return out;
}

void add_weighted(std::span<float> sum, std::span<const float> values, float share) {
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = sum[i] + share * values[i];
}

}  // namespace geoloco::diloco
