#include "faultproxy/shaper.h"

#include <algorithm>

#include "common/mix.h"

namespace geoloco::faultproxy {

double Shaper::jitter(double amplitude) {
  if (amplitude <= 0) return 0;
  rng_ = mix64(rng_ + 0x9e3779b97f4a7c15ull);
  const double u = static_cast<double>(rng_ >> 11) * 0x1.0p-53;  // [0, 1)
  return (2 * u - 1) * amplitude;
}

ShapedRead Shaper::shape(const DirectionFaults& f, double now, std::size_t bytes, LinkClock& link) {
  ShapedRead out;
  if (f.blackhole) {
    out.dropped = bytes;
    return out;
  }
  std::size_t allowed = bytes;
  if (f.close_after_bytes > 0) {
    const std::uint64_t left = f.close_after_bytes > passed_ ? f.close_after_bytes - passed_ : 0;
    if (left <= allowed) {
      allowed = static_cast<std::size_t>(left);
      out.cut = true;
      out.dropped = bytes - allowed;
    }
  }
  const std::size_t slice =
      f.slice_bytes > 0 ? static_cast<std::size_t>(f.slice_bytes) : std::max<std::size_t>(allowed, 1);
  for (std::size_t offset = 0; offset < allowed; offset += slice) {
    const std::size_t length = std::min(slice, allowed - offset);
    double ready = now;
    if (f.rate_bps > 0) {
      const double start = std::max(now, link.free_at_s);
      link.free_at_s = start + static_cast<double>(length) * 8.0 / f.rate_bps;
      ready = link.free_at_s;
    }
    double at = ready + std::max(0.0, f.latency_s + jitter(f.jitter_s));
    const double spacing = f.slice_bytes > 0 && passed_ > 0 ? f.slice_delay_s : 0.0;
    at = std::max(at, last_at_ + spacing);
    last_at_ = at;
    passed_ += length;
    out.pieces.push_back(Piece{at, offset, length});
  }
  return out;
}

double Shaper::read_ready_at(const DirectionFaults& f, const LinkClock& link, double now) {
  if (f.rate_bps <= 0) return now;
  return std::max(now, link.free_at_s - kPaceAheadSeconds);
}

}  // namespace geoloco::faultproxy
