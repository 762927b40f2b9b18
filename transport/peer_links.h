// What a site knows of its link to each peer, kept by the mesh from its
// control connections: up or down, since when, why it last failed, and how
// many dials failed in a row. It also decides what the log says about it,
// so an unreachable or refusing peer is one warning, not one per dial: the
// first failure of an outage is said (with the backoff the dialer uses),
// then a reminder once a minute with the count while it lasts (the reason
// alone cannot say "the same outage": through a proxy or a half-open port
// it alternates between a refused connect and a reset handshake), and the
// peer reached again is said once with the count of failed dials. Pure, with the clock given; mesh.h wires it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace geoloco::transport {

struct PeerLink {
  using Clock = std::chrono::steady_clock;
  bool up = false;                 ///< the control connection to the peer is live
  Clock::time_point since{};       ///< when `up` last changed (the first dial failure for a peer never reached)
  std::string last_error;          ///< why the link last went down or a dial failed ("" if never)
  std::uint64_t failed_dials = 0;  ///< dials that failed since the link was last up (this site dials the peer)
  std::uint64_t drops = 0;         ///< times the link went down after being up
};

class PeerLinks {
 public:
  using Clock = PeerLink::Clock;
  static constexpr std::chrono::seconds kRemindEvery{60};

  /// A dial to `peer` failed with `reason`; this site dials again after
  /// `retry_in`. Returns the warning to log: at the outage's first failure,
  /// then at most once per kRemindEvery; else "".
  std::string dial_failed(const std::string& peer, const std::string& reason, std::chrono::milliseconds retry_in,
                          Clock::time_point now);
  /// The control connection to `peer` is up. Returns the line to log when
  /// dials had failed before (how many, for how long), else "". Nothing
  /// changes when the link was up already (a connection replaced).
  std::string connected(const std::string& peer, Clock::time_point now);
  /// The control connection to `peer` closed with `reason` and none replaced
  /// it. Returns the line to log ("" if it was not up).
  std::string lost(const std::string& peer, const std::string& reason, Clock::time_point now);

  const std::map<std::string, PeerLink>& links() const { return links_; }

 private:
  std::map<std::string, PeerLink> links_;
  std::map<std::string, Clock::time_point> said_at_;  // when the current outage was last said, per peer
};

}  // namespace geoloco::transport
