// Small helpers of the job engine (job_run.cpp, job_round.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace geoloco::daemon {

/// Seconds from a to b; 0 when a was never set or b is before it.
inline double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return a.time_since_epoch().count() == 0 || b < a ? 0.0 : std::chrono::duration<double>(b - a).count();
}

inline bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace geoloco::daemon
