#include "transport/peer_links.h"

#include "common/status.h"

namespace geoloco::transport {

namespace {
double seconds(PeerLinks::Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 1000.0;
}
}  // namespace

std::string PeerLinks::dial_failed(const std::string& peer, const std::string& reason,
                                   std::chrono::milliseconds retry_in, Clock::time_point now) {
  PeerLink& link = links_[peer];
  if (link.failed_dials == 0 && !link.up) link.since = now;
  ++link.failed_dials;
  link.last_error = reason;
  auto said = said_at_.find(peer);
  if (said == said_at_.end()) {
    said_at_[peer] = now;
    return cat("cannot reach ", peer, ": ", reason, "; dialing again with backoff (next in ", retry_in.count() / 1000.0,
               " s); said again once a minute while it lasts");
  }
  if (now - said->second < kRemindEvery) return "";
  said->second = now;
  return cat("still cannot reach ", peer, ": ", link.failed_dials, " failed dial(s) in ", seconds(now - link.since),
             " s (last: ", reason, ")");
}

std::string PeerLinks::connected(const std::string& peer, Clock::time_point now) {
  PeerLink& link = links_[peer];
  if (link.up) return "";  // a new connection in place of a live one: the link never went down
  std::string line;
  if (link.failed_dials > 0)
    line = cat("reached ", peer, " after ", link.failed_dials, " failed dial(s) in ", seconds(now - link.since),
               " s (last: ", link.last_error, ")");
  link.up = true;
  link.since = now;
  link.failed_dials = 0;
  said_at_.erase(peer);
  return line;
}

std::string PeerLinks::lost(const std::string& peer, const std::string& reason, Clock::time_point now) {
  PeerLink& link = links_[peer];
  if (!link.up) return "";
  const double was_up = seconds(now - link.since);
  link.up = false;
  link.since = now;
  link.last_error = reason;
  ++link.drops;
  return cat("lost the connection to ", peer, " after ", was_up, " s: ", reason);
}

}  // namespace geoloco::transport
