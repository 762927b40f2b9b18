// The quorum rule with a fixed clock: each case checks the decision and the
// reason a user would read.
#include <catch2/catch.hpp>

#include "diloco/quorum.h"

using namespace geoloco::diloco;
using namespace std::chrono_literals;

namespace {
const Clock::time_point t0{std::chrono::hours(1)};

SiteReport alive(std::optional<Clock::duration> ready_after = std::nullopt, std::uint64_t tokens = 0) {
  SiteReport r;
  r.last_heartbeat = t0;
  if (ready_after) r.ready_at = t0 + *ready_after;
  r.tokens = tokens;
  return r;
}

QuorumOptions options(int min_sites, Millis deadline) {
  QuorumOptions o;
  o.min_sites = min_sites;
  o.deadline_ms = deadline;
  o.heartbeat_timeout_ms = 30s;
  return o;
}
}  // namespace

TEST_CASE("a round closes as soon as every live site is ready") {
  std::map<std::string, SiteReport> sites{{"b", alive(2s)}, {"a", alive(1s)}, {"c", alive(3s)}};
  auto d = decide_quorum(t0 + 3s, sites, options(2, 10s));
  CHECK(d.kind == QuorumDecision::Kind::close);
  CHECK(d.participants == std::vector<std::string>{"a", "b", "c"});  // sorted: the plan's order
  CHECK(d.late.empty());
  CHECK(d.reason == "closed: all 3 live sites ready");
}

TEST_CASE("with a quorum the round waits until the deadline, then leaves the late ones out") {
  std::map<std::string, SiteReport> sites{{"a", alive(1s)}, {"b", alive(4s)}, {"c", alive()}};
  // min_sites = 2: quorum at b's READY (t0+4s); deadline 10 s -> closes at t0+14s.
  auto before = decide_quorum(t0 + 13s, sites, options(2, 10s));
  CHECK(before.kind == QuorumDecision::Kind::wait);
  REQUIRE(before.wake_at);
  CHECK(*before.wake_at == t0 + 14s);
  CHECK(before.reason == "quorum of 2 reached; waiting up to 1000 ms more for c");

  // c keeps sending heartbeats meanwhile.
  sites["a"].last_heartbeat = sites["b"].last_heartbeat = sites["c"].last_heartbeat = t0 + 13s;
  auto at = decide_quorum(t0 + 14s, sites, options(2, 10s));
  CHECK(at.kind == QuorumDecision::Kind::close);
  CHECK(at.participants == std::vector<std::string>{"a", "b"});
  CHECK(at.late == std::vector<std::string>{"c"});
  CHECK(at.reason == "closed at the deadline: 2 ready, late: c");
}

TEST_CASE("below the quorum the round waits without a deadline") {
  std::map<std::string, SiteReport> sites{{"a", alive(1s)}, {"b", alive()}, {"c", alive()}};
  auto d = decide_quorum(t0 + 20s, sites, options(2, 1s));
  CHECK(d.kind == QuorumDecision::Kind::wait);
  CHECK(d.reason == "waiting: 1 of 2 required sites ready (waiting for b, c)");
  REQUIRE(d.wake_at);
  CHECK(*d.wake_at == t0 + 30s);  // the next heartbeat that could lapse
}

TEST_CASE("a joining site is not waited for once min_sites are ready; below them it is") {
  SiteReport joining = alive();
  joining.joining = true;
  std::map<std::string, SiteReport> sites{{"a", alive(1s)}, {"b", alive(2s)}, {"c", joining}};
  auto d = decide_quorum(t0 + 2s, sites, options(2, 10s));
  CHECK(d.kind == QuorumDecision::Kind::close);
  CHECK(d.participants == std::vector<std::string>{"a", "b"});
  CHECK(d.late == std::vector<std::string>{"c"});
  CHECK(d.reason == "closed: all 2 training sites ready; not waited for (joining): c");

  // With a training site still to come, the deadline holds for both.
  sites["b"].ready_at.reset();
  auto waiting = decide_quorum(t0 + 2s, sites, options(1, 10s));
  CHECK(waiting.kind == QuorumDecision::Kind::wait);
  CHECK(waiting.reason == "quorum of 1 reached; waiting up to 9000 ms more for b, c");
  // Below min_sites the joining site counts as one the round waits for.
  auto below = decide_quorum(t0 + 2s, sites, options(2, 10s));
  CHECK(below.kind == QuorumDecision::Kind::wait);
  CHECK(below.reason == "waiting: 1 of 2 required sites ready (waiting for b, c)");
}

TEST_CASE("dead sites are removed; the job pauses below min_sites") {
  std::map<std::string, SiteReport> sites{{"a", alive(1s)}, {"b", alive(2s)}, {"c", alive()}};
  sites["a"].last_heartbeat = sites["b"].last_heartbeat = t0 + 40s;
  // c's last heartbeat was at t0: dead at t0+30s. a and b are ready: all live sites ready.
  auto d = decide_quorum(t0 + 41s, sites, options(2, 10s));
  CHECK(d.kind == QuorumDecision::Kind::close);
  CHECK(d.participants == std::vector<std::string>{"a", "b"});
  CHECK(d.dead == std::vector<std::string>{"c"});
  CHECK(d.reason == "closed: all 2 live sites ready; no heartbeat from c");

  sites["b"].last_heartbeat = t0;  // b dies too
  auto p = decide_quorum(t0 + 41s, sites, options(2, 10s));
  CHECK(p.kind == QuorumDecision::Kind::pause);
  CHECK(p.reason == "paused: 1 live site(s), min_sites is 2; no heartbeat from b, c");
}

TEST_CASE("quorum options are validated") {
  CHECK(options(0, 1s).validate().message() == "straggler.min_sites must be at least 1, got 0");
  CHECK(options(1, -1s).validate().message() == "straggler.deadline must not be negative");
  CHECK(options(3, 0s).validate().ok());
}

TEST_CASE("a majority is more than half the sites, or half with the named coordinator") {
  const std::vector<std::string> three{"a", "b", "c"}, four{"a", "b", "c", "d"}, two{"a", "b"};
  CHECK(is_majority(three, "a", {"b", "c"}));
  CHECK_FALSE(is_majority(three, "a", {"a"}));
  CHECK_FALSE(is_majority(three, "a", {"c", "x", "y"}));  // names outside the job do not count
  CHECK(is_majority(four, "a", {"a", "d"}));
  CHECK_FALSE(is_majority(four, "a", {"b", "c"}));
  CHECK(is_majority(four, "a", {"b", "c", "d"}));
  CHECK(is_majority(two, "a", {"a"}));
  CHECK_FALSE(is_majority(two, "a", {"b"}));
  CHECK_FALSE(is_majority(two, "a", {}));
  CHECK(majority_words(four, "a") == "3 of the job's 4 sites, or 2 with a");
  CHECK(majority_words(three, "a") == "2 of the job's 3 sites");
}
