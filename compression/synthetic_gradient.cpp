#include "compression/synthetic_gradient.h"

#include <cmath>

#include "compression/counter_rng.h"

namespace geoloco::compression {

namespace {
constexpr std::uint64_t kSegment = 4096;  // scales change on multiples of this

// The scale of the tensor that segment s belongs to: a new tensor starts at
// a segment with probability 1/16, so tensors span 4 Ki..~256 Ki values.
float segment_scale(std::uint64_t seed, std::uint64_t segment) {
  std::uint64_t start = segment;
  while (start > 0 && (counter_random(seed ^ 0x7e45, start) & 15) != 0) --start;
  const float u1 = counter_uniform(seed ^ 0x5ca1e, start) + 0x1p-25f;
  const float u2 = counter_uniform(seed ^ 0xa9e1, start);
  const float normal = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
  return 1e-3f * std::exp(1.5f * normal);
}
}  // namespace

void fill_synthetic_gradient(std::span<float> out, std::uint64_t seed, std::uint64_t first) {
  std::uint64_t segment = ~0ull;
  float scale = 0.0f;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint64_t index = first + i;
    if (index / kSegment != segment) {
      segment = index / kSegment;
      scale = segment_scale(seed, segment);
    }
    const std::uint64_t r = counter_random(seed, index);
    const float u = static_cast<float>(r >> 40) * 0x1p-24f;           // [0, 1)
    const float magnitude = std::pow(1.0f - u, -1.0f / 3.0f) - 1.0f;  // Pareto tail, index 3
    out[i] = (r & 1) ? scale * magnitude : -scale * magnitude;
  }
}

}  // namespace geoloco::compression
