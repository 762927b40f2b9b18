// The inner trainer's random generator: SplitMix64 with uniform and
// Box–Muller normal draws written out here, because std:: distributions
// differ between standard libraries and a seed must give the same
// initialization and data order on every machine.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/mix.h"

namespace geoloco::inner {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  /// A generator for a sub-stream (a tensor, a data shard, an epoch), so
  /// streams do not shift when another stream draws more numbers.
  Rng(std::uint64_t seed, std::uint64_t stream) : state_(seed) {
    state_ = next() ^ (stream * 0xd1342543de82ef95ull + 0x632be59bd9b4e019ull);
  }

  std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  /// Uniform in [0, 1) with 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
  /// Uniform integer in [0, n), n > 0 (modulo bias is negligible for our n).
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  /// Standard normal (Box–Muller, one value per call).
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace geoloco::inner
