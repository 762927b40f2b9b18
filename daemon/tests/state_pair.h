// Two loopback sites, a and b, each with a StateTransfers of job "sync"
// (id 1): what the STATE_SYNC tests drive. b takes every state frame it
// receives and records what each did.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/state_transfers.h"
#include "transport/loopback.h"

namespace geoloco::daemon::testing {

using namespace std::chrono_literals;
using transport::FrameHeader;
namespace loopback = transport::loopback;

/// Whether two tensors hold the same bits.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// b records what each frame did (on b's thread only).
struct Pair {
  // Declared first, destroyed last: b's handler may run until the sites stop.
  std::unique_ptr<StateTransfers> a, b;
  std::vector<StateFrameOutcome::Kind> outcomes;
  std::string last_error;
  outer::OuterState* b_held = nullptr;  ///< b's own state, for offers from it (set on b's thread)
  bool b_in_place = false;              ///< whether b steps such offers on it where it lies
  bool last_lost = false;               ///< whether the last failure left b's own state stepped to no round
  std::unique_ptr<loopback::Federation> federation;
  std::vector<std::unique_ptr<loopback::Site>> sites;

  explicit Pair(std::uint64_t chunk_values) {
    auto f = loopback::Federation::create({"a", "b"});
    REQUIRE(f.ok());
    federation = std::move(*f);
    auto made = loopback::make_sites(*federation, {"a", "b"}, loopback::test_options());
    REQUIRE(made.ok());
    sites = std::move(*made);
    a = std::make_unique<StateTransfers>("sync", 1, sites[0]->mesh(), chunk_values);
    b = std::make_unique<StateTransfers>("sync", 1, sites[1]->mesh(), chunk_values);
    sites[1]->call([this] {
      sites[1]->mesh().set_control_handler([this](const std::string& peer, const FrameHeader& h, Buffer payload) {
        StateFrameOutcome out = b->on_frame(peer, h, payload, OwnState{b_held, b_in_place, {}});
        outcomes.push_back(out.kind);
        if (!out.error.empty()) last_error = out.error;
        if (out.kind == StateFrameOutcome::failed) last_lost = out.state_lost;
        return Status();
      });
      return 0;
    });
  }
  // b's outcomes once `count` have come (or after 5 s).
  std::vector<StateFrameOutcome::Kind> outcomes_after(std::size_t count) {
    std::vector<StateFrameOutcome::Kind> got;
    for (int tries = 0; tries < 500; ++tries) {
      got = sites[1]->call([this] { return outcomes; });
      if (got.size() >= count) break;
      std::this_thread::sleep_for(10ms);
    }
    return got;
  }
  Result<std::string> send(std::uint64_t round) {
    return sites[0]->spawn([this, round]() { return a->send("b", round); }).get();
  }
};

}  // namespace geoloco::daemon::testing
