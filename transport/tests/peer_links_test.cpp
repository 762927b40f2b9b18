// What the mesh says about a peer's link, with a fixed clock: an unreachable
// peer is one warning per outage (and a reminder a minute), not one per
// dial; reached again, it is said once with the count; a drop is said once
// and counted.
#include <catch2/catch.hpp>

#include "transport/peer_links.h"

using namespace geoloco::transport;
using namespace std::chrono_literals;

namespace {
const PeerLinks::Clock::time_point t0{std::chrono::hours(1)};
}

TEST_CASE("an unreachable peer is said once per outage, reminded once a minute, and said once when reached") {
  PeerLinks links;
  CHECK(links.dial_failed("b", "connection refused", 100ms, t0) ==
        "cannot reach b: connection refused; dialing again with backoff (next in 0.1 s); said again once a minute "
        "while it lasts");
  CHECK(links.dial_failed("b", "connection refused", 200ms, t0 + 1s).empty());
  CHECK(links.dial_failed("b", "TLS handshake failed: reset", 400ms, t0 + 2s).empty());  // the same outage
  CHECK(links.dial_failed("c", "connection refused", 100ms, t0 + 3s).size() > 0);        // per peer
  CHECK(links.dial_failed("b", "certificate verify failed", 10s, t0 + 59s).empty());
  CHECK(links.dial_failed("b", "certificate verify failed", 10s, t0 + 60s) ==
        "still cannot reach b: 5 failed dial(s) in 60 s (last: certificate verify failed)");
  CHECK(links.dial_failed("b", "certificate verify failed", 10s, t0 + 70s).empty());
  const PeerLink& b = links.links().at("b");
  CHECK_FALSE(b.up);
  CHECK(b.failed_dials == 6);
  CHECK(b.last_error == "certificate verify failed");
  CHECK(links.connected("b", t0 + 75500ms) ==
        "reached b after 6 failed dial(s) in 75.5 s (last: certificate verify failed)");
  CHECK(links.links().at("b").up);
  CHECK(links.links().at("b").failed_dials == 0);
  CHECK(links.connected("b", t0 + 80s).empty());  // a replaced connection: still up, nothing said
}

TEST_CASE("a drop is said once and counted; the next outage's first failure is said again") {
  PeerLinks links;
  CHECK(links.connected("b", t0).empty());  // reached at the first dial: nothing to say
  CHECK(links.lost("b", "connection to b closed", t0 + 2s) ==
        "lost the connection to b after 2 s: connection to b closed");
  CHECK(links.lost("b", "connection to b closed", t0 + 3s).empty());  // not up: nothing more
  CHECK(links.links().at("b").drops == 1);
  CHECK(links.dial_failed("b", "connection refused", 100ms, t0 + 3s).size() > 0);
  REQUIRE(links.connected("b", t0 + 4s).size() > 0);
  CHECK(links.lost("b", "reset", t0 + 5s).size() > 0);
  CHECK(links.dial_failed("b", "connection refused", 100ms, t0 + 6s).size() > 0);  // a new outage
  CHECK(links.links().at("b").drops == 2);
}
