// What geoloco-faultproxy does to a link (docs/faultproxy.md): per direction,
// delay with jitter, a bandwidth cap, writes sliced into pieces, a reset
// after N bytes, a blackhole (bytes read and dropped) and a partition (bytes
// held until it ends, as TCP's retransmissions would deliver them); per
// link, refusing new connections and a flapping link (reset, then refused
// for a while, every period). A change names only the fields it sets.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace geoloco::yaml {
class Problems;
}

namespace geoloco::faultproxy {

/// One direction of a link: "up" from the side that connects to the proxy
/// toward the target, "down" back.
struct DirectionFaults {
  double latency_s = 0;                 ///< one-way delay of every byte
  double jitter_s = 0;                  ///< ± uniform on top of the delay; the byte order is kept
  double rate_bps = 0;                  ///< bit/s, shared by the link's connections; 0: no cap
  std::uint64_t slice_bytes = 0;        ///< writes cut into pieces of at most this; 0: as read
  double slice_delay_s = 0;             ///< between two pieces
  std::uint64_t close_after_bytes = 0;  ///< a connection is reset after this many bytes; 0: never
  bool blackhole = false;               ///< bytes read and dropped
  bool partition = false;               ///< bytes held until the partition ends
  bool operator==(const DirectionFaults&) const = default;
};

struct LinkFaults {
  DirectionFaults up;
  DirectionFaults down;
  bool refuse = false;       ///< a new connection is reset as soon as it is accepted
  double flap_period_s = 0;  ///< every period from flap_since_s: connections reset, new ones refused
  double flap_down_s = 0;    ///< for this long
  double flap_since_s = 0;   ///< when the flapping was set
  bool operator==(const LinkFaults&) const = default;
  /// Whether the link is in a flap's down window at `t`.
  bool flapping_down(double t) const;
};

/// A change to a link: the fields it names on top of what is in force
/// (`clear` first puts back the link's faults from the proxy's file), and
/// whether it resets the link's connections when it takes effect.
struct FaultChange {
  bool clear = false;
  bool reset = false;
  std::vector<std::function<void(LinkFaults&, double at)>> edits;
  std::string text;  ///< what it sets, for the log ("up.latency=0.05s both.partition=true")
  void apply(LinkFaults& faults, double at) const;
};

/// Reads a change from a mapping with `up`, `down`, `both` (each a mapping of
/// latency, jitter, rate, slice, slice_delay, close_after, blackhole,
/// partition), `refuse`, `flap: {period, down}`, `clear` and `reset`. Keys
/// listed in `ignore` (the schedule's `at` and `link`) are skipped; any
/// other key is a problem.
FaultChange parse_change(const YAML::Node& node, const std::string& what, yaml::Problems& problems,
                         const std::vector<std::string>& ignore = {});

/// The faults as a one-line text, only the fields that are set ("none" if none).
std::string describe(const LinkFaults& faults);

}  // namespace geoloco::faultproxy
