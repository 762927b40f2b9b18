// SplitMix64's finalizer, the one 64-bit mix every seed in geoloco is derived
// with (stochastic rounding's counters, the all-reduce's encode seeds), so
// the same inputs give the same seeds in every library.
#pragma once

#include <cstdint>

namespace geoloco {

/// A bijective mix of 64 bits.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace geoloco
