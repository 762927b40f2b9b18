// Whom the coordinator waits for, with a fixed clock: a site idle at a
// round's first READY, one back from closed connections, one fetching the
// state, and round 1, where every trainer starts at once.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "daemon/coordinator_machine.h"
#include "daemon/tests/coordinator_test_sites.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::daemon::testing;

TEST_CASE("a site back from closed connections does not hold a round that began before its trainer trained") {
  // c's connections close during round 5's collection (a killed process);
  // it is back and says "inner" before the first READY of round 6, but its
  // trainer started after the others' phase: waiting for it would hold both.
  auto o = three_sites(2);
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 5, t0);
  REQUIRE(c.on_lost("c", t0 + 100ms).ok());
  for (const char* s : {"a", "b"}) REQUIRE(c.on_ready(s, ready(5, 100), t0 + 1s).ok());
  REQUIRE(c.step(t0 + 1s).plan);
  for (const char* s : {"a", "b"}) REQUIRE(c.on_commit(s, {5, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.step(t0 + 1100ms).committed);
  REQUIRE(c.on_heartbeat("c", t0 + 1200ms, "catching_up").ok());
  REQUIRE(c.on_heartbeat("c", t0 + 1400ms, "inner").ok());
  for (const char* s : {"a", "b"}) REQUIRE(c.on_ready(s, ready(6, 100), t0 + 2s).ok());
  auto p = c.step(t0 + 2s);  // not the deadline (t0 + 12 s)
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(p.plan->late == std::vector<std::string>{"c"});
  // Its late READY of round 6 ends it: round 7 waits for c as for any other.
  for (const char* s : {"a", "b"}) REQUIRE(c.on_commit(s, {6, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.on_commit("c", {6, "aaaaaaaaaaaaaaaa"}).ok());  // its ack as an observer
  REQUIRE(c.step(t0 + 2100ms).committed);
  REQUIRE(c.on_ready("c", ready(7, 100, 6), t0 + 2300ms).ok());
  REQUIRE(c.on_ready("a", ready(7, 100), t0 + 3s).ok());
  auto wait = c.step(t0 + 3s);
  CHECK_FALSE(wait.plan);  // b still trains
  REQUIRE(c.on_ready("b", ready(7, 100), t0 + 3100ms).ok());
  auto all = c.step(t0 + 3100ms);
  REQUIRE(all.plan);
  CHECK(all.plan->participants == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE(
    "a site idle when a round's first READY comes (back after a restart, no trainer yet) does not hold the round") {
  auto o = three_sites(2);
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 5, t0);
  REQUIRE(c.on_heartbeat("c", t0, "idle").ok());
  REQUIRE(c.on_heartbeat("b", t0, "inner").ok());
  REQUIRE(c.on_ready("a", ready(5, 100), t0 + 1s).ok());
  REQUIRE(c.on_heartbeat("c", t0 + 1500ms, "inner").ok());  // its trainer attached after the first READY
  CHECK_FALSE(c.step(t0 + 1500ms).plan);                    // b still trains: the round waits for b
  REQUIRE(c.on_ready("b", ready(5, 100), t0 + 2s).ok());
  auto p = c.step(t0 + 2s);  // not the deadline (t0 + 12 s): c was joining
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(p.plan->late == std::vector<std::string>{"c"});
  // The next round, c trains like the others and is waited for again.
  for (const char* s : {"a", "b"}) REQUIRE(c.on_commit(s, {5, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.step(t0 + 3s).committed);
  REQUIRE(c.on_ready("a", ready(6, 100), t0 + 4s).ok());
  REQUIRE(c.on_ready("b", ready(6, 100), t0 + 4s).ok());
  CHECK_FALSE(c.step(t0 + 4s).plan);
}

TEST_CASE("a READY ends the idle of the heartbeat before it: the next round waits for that site") {
  // Rounds faster than heartbeats: c's last heartbeat was sent before its
  // trainer attached, and said "idle"; its READY of round 1 came after it.
  auto o = three_sites(2);
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 1, t0);
  REQUIRE(c.on_heartbeat("c", t0, "idle").ok());
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(1, 100), t0 + 1s).ok());
  REQUIRE(c.step(t0 + 1s).plan);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_commit(s, {1, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.step(t0 + 1100ms).committed);
  REQUIRE(c.on_ready("a", ready(2, 100), t0 + 1200ms).ok());
  REQUIRE(c.on_ready("b", ready(2, 100), t0 + 1200ms).ok());
  auto wait = c.step(t0 + 1200ms);
  CHECK_FALSE(wait.plan);  // c is training, not joining: waited for up to the deadline
  REQUIRE(c.on_ready("c", ready(2, 100), t0 + 1300ms).ok());
  auto p = c.step(t0 + 1300ms);
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("a site back from closed connections is waited for from the first round that begins while it trains") {
  // Streaming drops a late fragment at its site, so c's first READYs never
  // come: the round that begins while its trainer trains waits for it.
  auto o = three_sites(2);
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 5, t0);
  REQUIRE(c.on_lost("c", t0 + 100ms).ok());
  REQUIRE(c.on_heartbeat("c", t0 + 500ms, "inner").ok());  // welcomed during round 5
  for (const char* s : {"a", "b"}) REQUIRE(c.on_ready(s, ready(5, 100), t0 + 1s).ok());
  auto p = c.step(t0 + 1s);
  REQUIRE(p.plan);
  CHECK(p.plan->late == std::vector<std::string>{"c"});
  for (const char* s : {"a", "b"}) REQUIRE(c.on_commit(s, {5, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.on_commit("c", {5, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.step(t0 + 1100ms).committed);
  for (const char* s : {"a", "b"}) REQUIRE(c.on_ready(s, ready(6, 100), t0 + 2s).ok());
  auto wait = c.step(t0 + 2s);
  CHECK_FALSE(wait.plan);  // round 6 began while c's trainer trained
  REQUIRE(wait.wake_at);
  CHECK(*wait.wake_at == t0 + 12s);
}

TEST_CASE("a site back from closed connections that still fetches the state is waited for up to the deadline") {
  // A slow link: not waiting would let the rounds run away from it.
  auto o = three_sites(2);
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 5, t0);
  REQUIRE(c.on_lost("c", t0 + 100ms).ok());
  REQUIRE(c.on_heartbeat("c", t0 + 500ms, "catching_up").ok());
  for (const char* s : {"a", "b"}) REQUIRE(c.on_ready(s, ready(5, 100), t0 + 1s).ok());
  auto wait = c.step(t0 + 1s);
  CHECK_FALSE(wait.plan);
  REQUIRE(wait.wake_at);
  CHECK(*wait.wake_at == t0 + 11s);
  // Its trainer holds a READY it cannot send before it catches up: still waited for.
  REQUIRE(c.on_heartbeat("c", t0 + 2s, "ready").ok());
  CHECK_FALSE(c.step(t0 + 2s).plan);
  // Its state is in place, its trainer not yet training: the round goes on without it.
  REQUIRE(c.on_heartbeat("c", t0 + 3s, "idle").ok());
  auto p = c.step(t0 + 3s);
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(p.plan->late == std::vector<std::string>{"c"});
}

TEST_CASE("a successor does not hold its first rounds for a site it did not know live when it took the office") {
  // The old coordinator c was killed; b took the office with a's vote and
  // resumes at round 58. c comes back and trains, from a later start.
  auto o = three_sites(2);
  o.stop_after_round = 0;
  o.live_at_start = {"a", "b"};
  CoordinatorMachine c(o, 58, t0);
  REQUIRE(c.on_heartbeat("c", t0 + 3s, "inner").ok());
  for (const char* s : {"a", "b"}) REQUIRE(c.on_ready(s, ready(58, 100), t0 + 4s).ok());
  auto p = c.step(t0 + 4s);  // not the deadline (t0 + 14 s)
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(p.plan->late == std::vector<std::string>{"c"});
}

TEST_CASE("at round 1 every site is waited for, idle or not: all trainers start at once") {
  auto o = three_sites(2);
  CoordinatorMachine c(o, 1, t0);
  REQUIRE(c.on_heartbeat("c", t0, "idle").ok());
  REQUIRE(c.on_ready("a", ready(1, 100), t0 + 1s).ok());
  REQUIRE(c.on_ready("b", ready(1, 100), t0 + 1s).ok());
  auto wait = c.step(t0 + 1s);
  CHECK_FALSE(wait.plan);
  REQUIRE(wait.wake_at);
  CHECK(*wait.wake_at == t0 + 11s);
}

// Round 7 of a 2-of-3 job: c fetches the state, a and b are READY at t0 + 1 s.
CoordinatorMachine round_7_with_c_catching_up() {
  auto o = three_sites(2);
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 7, t0);
  REQUIRE(c.on_heartbeat("c", t0, "catching_up").ok());
  REQUIRE(c.on_ready("a", ready(7, 100), t0 + 1s).ok());
  REQUIRE(c.on_ready("b", ready(7, 100), t0 + 1s).ok());
  return c;
}

TEST_CASE("a site catching up is not named late: it would only be sent the average beside the state it fetches") {
  CoordinatorMachine c = round_7_with_c_catching_up();
  CHECK_FALSE(c.step(t0 + 1s).plan);  // waited for up to the deadline: time for a slow link to catch up
  REQUIRE(c.on_heartbeat("c", t0 + 10s, "catching_up").ok());
  auto p = c.step(t0 + 11s);
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(p.plan->late.empty());
  // An idle site (its state in place, its trainer not training yet) is named: it observes and stays current.
  for (const char* s : {"a", "b"}) REQUIRE(c.on_commit(s, {7, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.step(t0 + 12s).committed);
  REQUIRE(c.on_heartbeat("c", t0 + 12s, "idle").ok());
  REQUIRE(c.on_ready("a", ready(8, 100), t0 + 13s).ok());
  REQUIRE(c.on_ready("b", ready(8, 100), t0 + 13s).ok());
  auto q = c.step(t0 + 13s);
  REQUIRE(q.plan);
  CHECK(q.plan->late == std::vector<std::string>{"c"});
}

TEST_CASE("a site waited for while it fetches the state is not held for once its state is in and its trainer idle") {
  CoordinatorMachine c = round_7_with_c_catching_up();
  CHECK_FALSE(c.step(t0 + 1s).plan);
  REQUIRE(c.on_heartbeat("c", t0 + 2s, "idle").ok());  // the state is in; its trainer starts
  auto p = c.step(t0 + 2s);                            // not the deadline (t0 + 11 s)
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(p.plan->late == std::vector<std::string>{"c"});
}
