// Wall-clock timing for benchmarks: the fastest of several passes, which on
// a shared machine is the figure least disturbed by other work.
#pragma once

#include <sys/resource.h>

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

/// CPU seconds (user + system) this process has used so far, all threads.
inline double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

}  // namespace geoloco::bench
