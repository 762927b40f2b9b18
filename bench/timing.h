// Wall-clock timing for benchmarks: the fastest of several passes, which on
// a shared machine is the figure least disturbed by other work.
#pragma once

#include <chrono>
#include <limits>

namespace geoloco::bench {

/// Seconds of the fastest of `repeats` calls of `fn`.
template <class Fn>
double best_seconds(int repeats, Fn&& fn) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (took.count() < best) best = took.count();
  }
  return best;
}

}  // namespace geoloco::bench
