// The simulator's random numbers: the inner trainer's generator
// (inner/rng.h: SplitMix64 with uniform and normal draws written out, the
// same numbers on every machine), and independent seeds per purpose.
#pragma once

#include <cstdint>

#include "inner/rng.h"

namespace geoloco::outer::sim {

using inner::Rng;

/// A seed for stream `stream` derived from `seed`, so sites and purposes
/// draw independent numbers.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  Rng r(seed ^ (stream * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull));
  return r.next();
}

}  // namespace geoloco::outer::sim
