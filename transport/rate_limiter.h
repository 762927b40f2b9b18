// A token bucket over a site's egress (TransportOptions::rate_limit_mbit),
// shared by all its connections, so the cap holds for the site's link as a
// whole. The decision is a pure function of `now`; the caller sleeps.
// Thread-safe: connections on different threads reserve from one bucket.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace geoloco::transport {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  /// `bytes_per_second` <= 0 disables the cap. `burst_bytes` is the most
  /// that can go out at once after an idle spell.
  TokenBucket(double bytes_per_second, double burst_bytes)
      : rate_(bytes_per_second), burst_(burst_bytes), tokens_(burst_bytes) {}

  bool enabled() const { return rate_ > 0; }

  /// Takes `bytes` from the bucket at time `now` (possibly going into debt)
  /// and returns when the caller may send them: `now` when there were enough
  /// tokens, later otherwise. Callers in a queue get successive times, so
  /// together they never exceed the rate.
  Clock::time_point reserve(Clock::time_point now, std::uint64_t bytes) {
    if (!enabled()) return now;
    std::lock_guard lock(mutex_);
    if (last_ == Clock::time_point{}) last_ = now;
    const double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + std::max(0.0, elapsed) * rate_);
    last_ = std::max(last_, now);
    tokens_ -= static_cast<double>(bytes);
    if (tokens_ >= 0) return now;
    return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(-tokens_ / rate_));
  }

 private:
  double rate_;
  double burst_;
  double tokens_;
  Clock::time_point last_{};
  std::mutex mutex_;
};

}  // namespace geoloco::transport
