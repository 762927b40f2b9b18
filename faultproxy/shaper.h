// When each byte read from one side of a connection is written to the
// other, under one direction's faults. Pure (times are seconds on the
// proxy's clock), one per direction of a connection; the rate cap's clock
// is the link's, shared by all its connections in that direction, as one
// wide-area link is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "faultproxy/faults.h"

namespace geoloco::faultproxy {

/// Bytes [offset, offset + length) of a read, written at `at_s`.
struct Piece {
  double at_s = 0;
  std::size_t offset = 0;
  std::size_t length = 0;
};

struct ShapedRead {
  std::vector<Piece> pieces;  ///< in order; their times never decrease
  std::size_t dropped = 0;    ///< bytes a blackhole or a cut discarded
  bool cut = false;           ///< reset the connection after the last piece (close_after)
};

/// The link's clock for a rate cap: when the bytes given so far have left.
struct LinkClock {
  double free_at_s = 0;
};

class Shaper {
 public:
  explicit Shaper(std::uint64_t seed) : rng_(seed) {}

  /// `bytes` read at `now` under `faults`. A piece is written no earlier than
  /// its bytes have passed the rate cap (after the ones before it on the
  /// link) plus the delay and jitter, never before the piece before it, and
  /// a slice delay after it when slicing.
  ShapedRead shape(const DirectionFaults& faults, double now, std::size_t bytes, LinkClock& link);

  /// When the next read may be taken: with a rate cap, not much before the
  /// link is free (so the sender feels the cap, as it would a slow link's
  /// window); without one, at once.
  static double read_ready_at(const DirectionFaults& faults, const LinkClock& link, double now);

  /// Bytes handed to pieces so far (what close_after counts).
  std::uint64_t passed() const { return passed_; }

 private:
  double jitter(double amplitude);

  std::uint64_t rng_;
  double last_at_ = 0;
  std::uint64_t passed_ = 0;
};

/// How far ahead of the link's clock reads may run under a rate cap.
inline constexpr double kPaceAheadSeconds = 0.02;

}  // namespace geoloco::faultproxy
