// A small deterministic random generator for the simulator's data and
// minibatches: SplitMix64, with uniform and Box–Muller normal draws written
// out here (std::normal_distribution's algorithm differs between standard
// libraries, and a simulation must give the same numbers everywhere).
#pragma once

#include <cmath>
#include <cstdint>

namespace geoloco::outer::sim {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
  /// Uniform integer in [0, n), n > 0 (modulo bias is negligible for small n).
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  /// Standard normal (Box–Muller, one value per call).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

/// A seed for stream `stream` derived from `seed`, so sites and purposes
/// draw independent numbers.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  Rng r(seed ^ (stream * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull));
  return r.next();
}

}  // namespace geoloco::outer::sim
