// A counter-based random generator: the value for (seed, index) is a pure
// function of both, so stochastic rounding is reproducible, needs no state,
// and any element can be encoded independently of the others.
#pragma once

#include <cstdint>

#include "common/mix.h"

namespace geoloco::compression {

using geoloco::mix64;

/// 64 random bits for element `index` of the stream `seed`.
constexpr std::uint64_t counter_random(std::uint64_t seed, std::uint64_t index) {
  return mix64(mix64(seed) + (index + 1) * 0x9e3779b97f4a7c15ull);
}

/// Uniform in [0, 1) with 24 bits, exactly representable as a float.
constexpr float counter_uniform(std::uint64_t seed, std::uint64_t index) {
  return static_cast<float>(counter_random(seed, index) >> 40) * 0x1p-24f;
}

/// The seed of chunk `chunk` of a stream seeded `seed`.
constexpr std::uint64_t chunk_seed(std::uint64_t seed, std::uint64_t chunk) {
  return mix64(seed ^ mix64(chunk + 0x632be59bd9b4e019ull));
}

}  // namespace geoloco::compression
