// What the coordinator's tests share: a fixed clock, a job of three sites
// and a READY, each by value.
#pragma once

#include <chrono>
#include <string>

#include "daemon/coordinator_machine.h"

namespace geoloco::daemon::testing {

using namespace std::chrono_literals;

inline const Clock::time_point t0{std::chrono::hours(2)};

inline CoordinatorOptions three_sites(int min_sites = 3) {
  CoordinatorOptions o;
  o.sites = {"a", "b", "c"};
  o.quorum.min_sites = min_sites;
  o.quorum.deadline_ms = 10s;
  o.quorum.heartbeat_timeout_ms = 30s;
  o.stop_after_round = 2;
  return o;
}

inline ReadyMessage ready(std::uint64_t round, std::uint64_t tokens, std::uint64_t anchor_round = 0) {
  return ReadyMessage{round, anchor_round ? anchor_round : round, tokens, 10, 0.5};
}

}  // namespace geoloco::daemon::testing
