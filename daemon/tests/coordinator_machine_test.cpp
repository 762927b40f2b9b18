// The coordinator's rounds with a fixed clock: plans, weights, commits,
// aborts, stragglers and the end of the job, each checked by value.
#include <algorithm>
#include <catch2/catch.hpp>

#include "daemon/coordinator_machine.h"
#include "daemon/tests/coordinator_test_sites.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace std::chrono_literals;

using namespace geoloco::daemon::testing;

namespace {
// Sites named by value: GCC 12 misreads `o.self = "a"` as an overlapping memcpy (-Wrestrict).
const std::string kA = "a", kB = "b";
}  // namespace

TEST_CASE("a round plans with token weights, commits on equal digests, and the job ends at its last round") {
  CoordinatorMachine c(three_sites(), 1, t0);
  CHECK_FALSE(c.step(t0).plan);
  REQUIRE(c.on_ready("b", ready(1, 200), t0 + 1s).ok());
  REQUIRE(c.on_ready("a", ready(1, 100), t0 + 2s).ok());
  CHECK_FALSE(c.step(t0 + 2s).plan);  // c is missing and min_sites is 3
  REQUIRE(c.on_ready("c", ready(1, 300), t0 + 3s).ok());
  auto a = c.step(t0 + 3s);
  REQUIRE(a.plan);
  CHECK(a.plan->round == 1);
  CHECK(a.plan->participants == std::vector<std::string>{"a", "b", "c"});
  CHECK(a.plan->weights == std::vector<double>{100, 200, 300});
  CHECK(a.plan->late.empty());
  CHECK(c.phase() == CoordinatorMachine::Phase::planned);

  // A READY or COMMIT out of turn is refused with the reason.
  CHECK(c.on_ready("a", ready(1, 1), t0 + 4s).message() == "READY of round 1 from a, but round 1 is being exchanged");
  CHECK(c.on_commit("a", {2, "0123456789abcdef"}).code() == Err::mismatch);

  for (const char* s : {"a", "b"}) REQUIRE(c.on_commit(s, {1, "0123456789abcdef"}).ok());
  CHECK_FALSE(c.step(t0 + 5s).committed);  // c has not committed
  REQUIRE(c.on_commit("c", {1, "0123456789abcdef"}).ok());
  auto done = c.step(t0 + 6s);
  REQUIRE(done.committed);
  CHECK(done.committed->anchor_digest == "0123456789abcdef");
  CHECK(c.round() == 2);
  CHECK(c.phase() == CoordinatorMachine::Phase::collecting);

  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(2, 10), t0 + 7s).ok());
  REQUIRE(c.step(t0 + 7s).plan);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_commit(s, {2, "00000000000000aa"}).ok());
  auto last = c.step(t0 + 8s);
  REQUIRE(last.committed);
  CHECK(c.phase() == CoordinatorMachine::Phase::finished);
  CHECK(last.notes.back() == "job finished after round 2 (630 tokens)");
}

TEST_CASE("with a quorum the deadline leaves a straggler out; its carried work joins later, decayed") {
  auto o = three_sites(2);
  o.straggler.decay = 0.5;
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 1, t0);
  REQUIRE(c.on_ready("a", ready(1, 100), t0 + 1s).ok());
  REQUIRE(c.on_ready("b", ready(1, 100), t0 + 2s).ok());
  CHECK(c.on_heartbeat("c", t0 + 5s).ok());
  auto wait = c.step(t0 + 5s);
  CHECK_FALSE(wait.plan);
  REQUIRE(wait.wake_at);
  CHECK(*wait.wake_at == t0 + 12s);  // deadline after the 2nd READY
  CHECK(c.on_heartbeat("c", t0 + 11s).ok());
  auto p = c.step(t0 + 12s);
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(p.plan->late == std::vector<std::string>{"c"});
  for (const char* s : {"a", "b"}) REQUIRE(c.on_commit(s, {1, "1111111111111111"}).ok());
  REQUIRE(c.step(t0 + 13s).committed);

  // Round 2: c reports work from anchor 1 (one round late): weight 100 x 0.5.
  REQUIRE(c.on_ready("a", ready(2, 100), t0 + 14s).ok());
  REQUIRE(c.on_ready("b", ready(2, 100), t0 + 14s).ok());
  REQUIRE(c.on_ready("c", ready(2, 100, 1), t0 + 14s).ok());
  auto p2 = c.step(t0 + 14s);
  REQUIRE(p2.plan);
  CHECK(p2.plan->participants == std::vector<std::string>{"a", "b", "c"});
  CHECK(p2.plan->weights == std::vector<double>{100, 100, 50});
}

TEST_CASE("drop discards late work and names the site as late") {
  auto o = three_sites(1);
  o.straggler.policy = diloco::StragglerPolicy::drop;
  CoordinatorMachine c(o, 3, t0);
  REQUIRE(c.on_ready("a", ready(3, 100), t0).ok());
  REQUIRE(c.on_ready("b", ready(3, 100), t0).ok());
  REQUIRE(c.on_ready("c", ready(3, 100, 2), t0).ok());
  auto p = c.step(t0);
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(p.plan->late == std::vector<std::string>{"c"});
  bool noted = false;
  for (const auto& n : p.notes) noted |= n.find("policy drop: discarding 10 inner steps") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("a silent participant or differing digests abort the round, which is collected again") {
  CoordinatorMachine c(three_sites(), 1, t0);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(1, 10), t0).ok());
  REQUIRE(c.step(t0).plan);
  REQUIRE(c.on_commit("a", {1, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.on_heartbeat("a", t0 + 29s).ok());
  REQUIRE(c.on_heartbeat("c", t0 + 29s).ok());
  auto waiting = c.step(t0 + 29s);
  REQUIRE(waiting.wake_at);
  CHECK(*waiting.wake_at == t0 + 30s);  // b's heartbeat lapses then
  auto aborted = c.step(t0 + 30s);
  REQUIRE(aborted.abort);
  CHECK(aborted.abort->reason == "participant b stopped sending heartbeats during the exchange");
  CHECK(c.round() == 1);
  CHECK(c.phase() == CoordinatorMachine::Phase::collecting);

  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(1, 10), t0 + 31s).ok());
  REQUIRE(c.step(t0 + 31s).plan);
  // A COMMIT of the aborted attempt counts for nothing in the new one.
  CHECK(c.on_commit("a", {1, "aaaaaaaaaaaaaaaa", 0}).message() ==
        "COMMIT of round 1 attempt 0 from a, but attempt 1 is being exchanged");
  REQUIRE(c.on_commit("a", {1, "aaaaaaaaaaaaaaaa", 1}).ok());
  REQUIRE(c.on_commit("b", {1, "aaaaaaaaaaaaaaaa", 1}).ok());
  REQUIRE(c.on_commit("c", {1, "cccccccccccccccc", 1}).ok());
  auto mismatch = c.step(t0 + 32s);
  REQUIRE(mismatch.abort);
  CHECK(mismatch.abort->reason ==
        "anchor digests differ after round 1: a has aaaaaaaaaaaaaaaa, c has cccccccccccccccc");
}

TEST_CASE("messages from strangers or for other rounds are refused") {
  CoordinatorMachine c(three_sites(), 5, t0);
  CHECK(c.on_ready("mallory", ready(5, 1), t0).message() == "READY from 'mallory', not a site of this job");
  CHECK(c.on_ready("a", ready(4, 1), t0).message() == "READY of round 4 from a, but round 5 is collecting");
  CHECK(c.on_heartbeat("zed", t0).code() == Err::invalid_argument);
  CHECK(c.on_commit("a", {5, "0123456789abcdef"}).message() ==
        "COMMIT of round 5 from a, but round 5 is not being exchanged");
}

TEST_CASE("a repeated READY keeps the time of the first, so the deadline still fires") {
  // Sites resend READY every heartbeat until a PLAN comes; if each resend
  // restarted the deadline clock, a straggler would hold every round up.
  auto o = three_sites(2);
  CoordinatorMachine c(o, 1, t0);
  REQUIRE(c.on_ready("a", ready(1, 100), t0 + 1s).ok());
  REQUIRE(c.on_ready("b", ready(1, 100), t0 + 2s).ok());
  for (auto t : {4s, 6s, 8s, 10s, 11s}) {
    REQUIRE(c.on_ready("a", ready(1, 100), t0 + t).ok());
    REQUIRE(c.on_ready("b", ready(1, 100), t0 + t).ok());
    CHECK(c.on_heartbeat("c", t0 + t).ok());
  }
  auto p = c.step(t0 + 12s);
  REQUIRE(p.plan);
  CHECK(p.plan->late == std::vector<std::string>{"c"});
}

TEST_CASE("a participant's failure report aborts the round; the next plan is a new attempt, without that site") {
  CoordinatorMachine c(three_sites(2), 1, t0);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(1, 100), t0).ok());
  auto p = c.step(t0);
  REQUIRE(p.plan);
  CHECK(p.plan->attempt == 0);
  CHECK(p.plan->tokens == 300);
  CHECK(c.on_failed("x", FailedMessage{1, 0, "?"}).code() == Err::invalid_argument);
  CHECK(c.on_failed("b", FailedMessage{2, 0, "?"}).code() == Err::mismatch);
  // A failure b reports about a peer: b is not to blame and counts at once.
  REQUIRE(c.on_failed("b", FailedMessage{1, 0, "peer c: no data for 2000 ms"}).ok());
  auto peer = c.step(t0 + 1s);
  REQUIRE(peer.abort);
  CHECK(peer.abort->reason == "b could not finish the exchange: peer c: no data for 2000 ms");
  CHECK(peer.notes.size() == 1);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(1, 100), t0 + 1s).ok());
  auto all = c.step(t0 + 1s + CoordinatorMachine::kReplanPause);
  REQUIRE(all.plan);
  CHECK(all.plan->participants == std::vector<std::string>{"a", "b", "c"});
  // A failure of b's own (its disk): b sits out.
  REQUIRE(
      c.on_failed("b", FailedMessage{1, all.plan->attempt, "round 1's averaged Δ cannot be kept on disk", true}).ok());
  auto a = c.step(t0 + 2s);
  REQUIRE(a.abort);
  CHECK(a.abort->round == 1);
  CHECK(a.abort->reason == "b could not finish the exchange: round 1's averaged Δ cannot be kept on disk");
  CHECK(std::find(a.notes.begin(), a.notes.end(),
                  "b sits out the rounds planned in the next 30 s (its READY does not count; it observes them and its "
                  "work is late)") != a.notes.end());
  // b sits out for a heartbeat timeout: its READY does not count, so the
  // round closes without it at the deadline (a site whose disk is full
  // would fail every attempt it is in).
  for (const char* s : {"a", "b", "c"}) {
    REQUIRE(c.on_ready(s, ready(1, 100), t0 + 3s).ok());
    REQUIRE(c.on_heartbeat(s, t0 + 3s).ok());
  }
  auto waiting = c.step(t0 + 3s);
  CHECK_FALSE(waiting.plan);
  REQUIRE(waiting.wake_at);
  CHECK(*waiting.wake_at == t0 + 13s);  // the deadline after the second READY
  auto again = c.step(t0 + 13s);
  REQUIRE(again.plan);
  CHECK(again.plan->round == 1);
  CHECK(again.plan->attempt == 2);
  CHECK(again.plan->participants == std::vector<std::string>{"a", "c"});
  CHECK(again.plan->late == std::vector<std::string>{"b"});
  // A late report of the first attempt does not abort the second.
  CHECK(c.on_failed("c", FailedMessage{1, 0, "peer b: reset"}).message() ==
        "failure report of round 1 attempt 0 from c, but round 1 attempt 2 is not being exchanged");
  CHECK_FALSE(c.step(t0 + 14s).abort);
  for (const char* s : {"a", "c"}) REQUIRE(c.on_commit(s, {1, "1111111111111111", 2}).ok());
  REQUIRE(c.step(t0 + 14s).committed);
  // A heartbeat timeout after the abort, b counts again.
  for (const char* s : {"a", "b", "c"}) {
    REQUIRE(c.on_heartbeat(s, t0 + 33s).ok());
    REQUIRE(c.on_ready(s, ready(2, 100), t0 + 33s).ok());
  }
  auto back = c.step(t0 + 33s);
  REQUIRE(back.plan);
  CHECK(back.plan->participants == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("a token stop ends the job with the round that reaches it, marked final") {
  auto o = three_sites();
  o.stop_after_round = 0;
  o.stop_after_tokens = 500;
  o.tokens_so_far = 250;  // a resumed job
  CoordinatorMachine c(o, 3, t0);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(3, 100), t0).ok());
  REQUIRE(c.step(t0).plan);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_commit(s, {3, "2222222222222222"}).ok());
  auto done = c.step(t0 + 1s);
  REQUIRE(done.committed);
  CHECK(done.committed->final);
  CHECK(c.tokens() == 550);
  CHECK(c.phase() == CoordinatorMachine::Phase::finished);
}

TEST_CASE("a resumed coordinator starts at the attempt after its journal's last plan, and counts on from there") {
  auto o = three_sites();
  o.stop_after_round = 0;
  o.first_attempt = 3;  // attempts 0..2 of round 2 were planned before the restart
  CoordinatorMachine c(o, 2, t0);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(2, 100), t0).ok());
  auto p = c.step(t0);
  REQUIRE(p.plan);
  CHECK(p.plan->round == 2);
  CHECK(p.plan->attempt == 3);
  REQUIRE(c.on_commit("a", {2, "0123456789abcdef", 3}).ok());
  REQUIRE(c.on_commit("b", {2, "fedcba9876543210", 3}).ok());
  REQUIRE(c.on_commit("c", {2, "fedcba9876543210", 3}).ok());
  REQUIRE(c.step(t0 + 1s).abort);  // digests differ
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(2, 100), t0 + 2s).ok());
  auto again = c.step(t0 + 2s);
  REQUIRE(again.plan);
  CHECK(again.plan->attempt == 4);
  // The next round starts at attempt 0: keys are (round, attempt).
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_commit(s, {2, "0123456789abcdef", 4}).ok());
  REQUIRE(c.step(t0 + 3s).committed);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(3, 100), t0 + 4s).ok());
  auto next = c.step(t0 + 4s);
  REQUIRE(next.plan);
  CHECK(next.plan->round == 3);
  CHECK(next.plan->attempt == 0);
}

TEST_CASE("aborts in a row pause the next plan, doubling up to a bound; a commit ends the pauses") {
  // An attempt that fails at once (a data connection down) would otherwise
  // be planned again and again as fast as messages go.
  CoordinatorMachine c(three_sites(), 1, t0);
  auto t = t0;
  std::vector<Millis> pauses;
  for (int abort = 0; abort < 8; ++abort) {
    for (const char* s : {"a", "b", "c"}) {
      REQUIRE(c.on_ready(s, ready(1, 100), t).ok());
      REQUIRE(c.on_heartbeat(s, t).ok());
    }
    auto planned = c.step(t);
    if (!planned.plan) {
      REQUIRE(planned.wake_at);
      pauses.push_back(std::chrono::duration_cast<Millis>(*planned.wake_at - t));
      CHECK_FALSE(c.step(*planned.wake_at - 1ms).plan);  // not a moment before
      t = *planned.wake_at;
      for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_heartbeat(s, t).ok());
      planned = c.step(t);
    }
    REQUIRE(planned.plan);
    REQUIRE(c.on_commit("a", {1, "aaaaaaaaaaaaaaaa", planned.plan->attempt}).ok());
    REQUIRE(c.on_commit("b", {1, "bbbbbbbbbbbbbbbb", planned.plan->attempt}).ok());
    REQUIRE(c.on_commit("c", {1, "bbbbbbbbbbbbbbbb", planned.plan->attempt}).ok());
    REQUIRE(c.step(t).abort);  // digests differ
  }
  CHECK(pauses == std::vector<Millis>{100ms, 200ms, 400ms, 800ms, 1600ms, 3200ms, 5000ms});
  // The ninth attempt commits; the next round is planned at once.
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(1, 100), t + 5s).ok());
  auto ninth = c.step(t + 5s);
  REQUIRE(ninth.plan);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_commit(s, {1, "aaaaaaaaaaaaaaaa", ninth.plan->attempt}).ok());
  REQUIRE(c.step(t + 5s).committed);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(2, 100), t + 5s).ok());
  CHECK(c.step(t + 5s).plan);
}

TEST_CASE("a round commits only once a majority of the job's sites holds its outcome, observers counted") {
  CoordinatorOptions o;
  o.sites = {"a", "b", "c", "d", "e"};
  o.self = kA;
  o.named = kA;
  o.quorum.min_sites = 2;
  o.quorum.deadline_ms = 1s;
  o.quorum.heartbeat_timeout_ms = 30s;
  CoordinatorMachine c(o, 1, t0);
  REQUIRE(c.on_ready("a", ready(1, 100), t0).ok());
  REQUIRE(c.on_ready("b", ready(1, 100), t0).ok());
  auto p = c.step(t0 + 1s);
  REQUIRE(p.plan);
  CHECK(p.plan->late == std::vector<std::string>{"c", "d", "e"});
  REQUIRE(c.on_commit("a", {1, "1111111111111111"}).ok());
  REQUIRE(c.on_commit("b", {1, "1111111111111111"}).ok());
  // c computed another anchor: not a holder of this outcome.
  REQUIRE(c.on_commit("c", {1, "2222222222222222"}).ok());
  auto waiting = c.step(t0 + 2s);
  CHECK_FALSE(waiting.committed);
  CHECK_FALSE(waiting.abort);
  REQUIRE(waiting.wake_at);
  CHECK(*waiting.wake_at == t0 + 30s);  // d and e may still answer until their heartbeats lapse
  REQUIRE(c.on_commit("d", {1, "1111111111111111"}).ok());
  auto done = c.step(t0 + 3s);
  REQUIRE(done.committed);
  CHECK(done.committed->anchor_digest == "1111111111111111");

  SECTION("observers that fall silent leave the round to abort, naming the rule") {
    CoordinatorMachine d(o, 1, t0);
    REQUIRE(d.on_ready("a", ready(1, 100), t0).ok());
    REQUIRE(d.on_ready("b", ready(1, 100), t0).ok());
    REQUIRE(d.step(t0 + 1s).plan);
    REQUIRE(d.on_commit("a", {1, "1111111111111111"}).ok());
    REQUIRE(d.on_commit("b", {1, "1111111111111111"}).ok());
    for (const char* s : {"a", "b"}) REQUIRE(d.on_heartbeat(s, t0 + 30s).ok());
    auto aborted = d.step(t0 + 30s);
    REQUIRE(aborted.abort);
    CHECK(aborted.abort->reason ==
          "only 2 site(s) hold round 1's outcome (a, b); a commit needs 3 of the job's 5 sites");
  }
}

TEST_CASE("without a majority of the job's sites live the job pauses, and says what it needs") {
  CoordinatorOptions o = three_sites(1);
  o.self = kA;
  o.named = kA;
  CoordinatorMachine c(o, 1, t0);
  REQUIRE(c.on_ready("a", ready(1, 100), t0 + 31s).ok());
  auto paused = c.step(t0 + 31s);
  CHECK_FALSE(paused.plan);
  REQUIRE_FALSE(paused.notes.empty());
  CHECK(paused.notes.back() ==
        "paused: only 1 of the job's 3 sites are live (a); a round commits only with 2 of the job's 3 sites");
  REQUIRE(c.on_heartbeat("c", t0 + 32s).ok());
  REQUIRE(c.on_ready("c", ready(1, 100), t0 + 32s).ok());
  auto p = c.step(t0 + 32s);
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "c"});
}

TEST_CASE("a successor's plans, commits and aborts carry its epoch, and its attempts start past every older epoch's") {
  CoordinatorOptions o = three_sites();
  o.self = kB;
  o.named = kA;
  o.epoch = 2;
  o.stop_after_round = 0;
  o.tokens_so_far = 1000;
  CoordinatorMachine c(o, 4, t0);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(4, 100), t0).ok());
  auto p = c.step(t0);
  REQUIRE(p.plan);
  CHECK(p.plan->epoch == 2);
  CHECK(p.plan->attempt == 2 * kAttemptsPerEpoch);
  REQUIRE(c.on_commit("a", {4, "3333333333333333", p.plan->attempt}).ok());
  REQUIRE(c.on_commit("b", {4, "4444444444444444", p.plan->attempt}).ok());
  REQUIRE(c.on_commit("c", {4, "4444444444444444", p.plan->attempt}).ok());
  auto a = c.step(t0 + 1s);  // digests differ
  REQUIRE(a.abort);
  CHECK(a.abort->epoch == 2);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(4, 100), t0 + 2s).ok());
  auto again = c.step(t0 + 2s);
  REQUIRE(again.plan);
  CHECK(again.plan->attempt == 2 * kAttemptsPerEpoch + 1);
  // An older epoch's attempt of the same number space cannot be acknowledged.
  CHECK(c.on_commit("a", {4, "3333333333333333", 1}).code() == Err::mismatch);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_commit(s, {4, "3333333333333333", again.plan->attempt}).ok());
  auto done = c.step(t0 + 3s);
  REQUIRE(done.committed);
  CHECK(done.committed->epoch == 2);
  CHECK(done.committed->tokens == 1300);
  // The next round starts at the epoch's first attempt.
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(5, 100), t0 + 4s).ok());
  auto next = c.step(t0 + 4s);
  REQUIRE(next.plan);
  CHECK(next.plan->attempt == 2 * kAttemptsPerEpoch);
}

TEST_CASE("a successor counts the sites it did not hear as silent from the start, so its first round closes at once") {
  CoordinatorOptions o = three_sites(2);
  o.self = kB;
  o.named = kA;
  o.epoch = 1;
  o.live_at_start = {"b", "c"};  // a, the old coordinator, is gone
  CoordinatorMachine c(o, 4, t0);
  REQUIRE(c.on_ready("b", ready(4, 100), t0 + 1s).ok());
  REQUIRE(c.on_ready("c", ready(4, 100), t0 + 1s).ok());
  auto p = c.step(t0 + 1s);
  REQUIRE(p.plan);  // every live site is READY: no deadline to wait for a
  CHECK(p.plan->participants == std::vector<std::string>{"b", "c"});
}

TEST_CASE("a site whose connections close counts as silent at once: the round closes without it, no deadline waited") {
  auto o = three_sites(2);
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 1, t0);
  REQUIRE(c.on_ready("a", ready(1, 100), t0 + 1s).ok());
  REQUIRE(c.on_ready("b", ready(1, 100), t0 + 1s).ok());
  auto waiting = c.step(t0 + 1s);
  CHECK_FALSE(waiting.plan);  // c is live: its READY is awaited until the deadline
  REQUIRE(waiting.wake_at);
  CHECK(*waiting.wake_at == t0 + 11s);
  REQUIRE(c.on_lost("c", t0 + 2s).ok());
  auto p = c.step(t0 + 2s);
  REQUIRE(p.plan);
  CHECK(p.plan->participants == std::vector<std::string>{"a", "b"});
  CHECK(c.on_lost("z", t0 + 2s).code() == Err::invalid_argument);
}

TEST_CASE("a participant whose connections close before its COMMIT aborts the exchange; the next plan leaves it out") {
  auto o = three_sites(2);
  o.stop_after_round = 0;
  CoordinatorMachine c(o, 1, t0);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(1, 10), t0).ok());
  REQUIRE(c.step(t0).plan);
  REQUIRE(c.on_commit("a", {1, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.on_lost("b", t0 + 1s).ok());
  auto aborted = c.step(t0 + 1s);  // not a heartbeat timeout (30 s) later
  REQUIRE(aborted.abort);
  CHECK(aborted.abort->reason == "participant b's connections closed during the exchange");
  CHECK(c.phase() == CoordinatorMachine::Phase::collecting);
  // a and c are READY again; b is silent, so the round closes as soon as the replan pause is over.
  REQUIRE(c.on_ready("a", ready(1, 10), t0 + 1s).ok());
  REQUIRE(c.on_ready("c", ready(1, 10), t0 + 1s).ok());
  auto again = c.step(t0 + 1s + CoordinatorMachine::kReplanPause);
  REQUIRE(again.plan);
  CHECK(again.plan->participants == std::vector<std::string>{"a", "c"});
  // Back and training: its heartbeat counts it live again, but its phase
  // began after the others': round 2 closes without it, and its work is late.
  REQUIRE(c.on_commit("a", {1, "aaaaaaaaaaaaaaaa", 1}).ok());
  REQUIRE(c.on_commit("c", {1, "aaaaaaaaaaaaaaaa", 1}).ok());
  REQUIRE(c.step(t0 + 2s).committed);
  REQUIRE(c.on_heartbeat("b", t0 + 3s, "inner").ok());
  REQUIRE(c.on_ready("a", ready(2, 10), t0 + 3s).ok());
  REQUIRE(c.on_ready("c", ready(2, 10), t0 + 3s).ok());
  auto without_b = c.step(t0 + 3s);
  REQUIRE(without_b.plan);
  CHECK(without_b.plan->participants == std::vector<std::string>{"a", "c"});
  CHECK(without_b.plan->late == std::vector<std::string>{"b"});
}

TEST_CASE("a participant lost after its COMMIT does not undo the round") {
  CoordinatorMachine c(three_sites(), 1, t0);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_ready(s, ready(1, 10), t0).ok());
  REQUIRE(c.step(t0).plan);
  for (const char* s : {"a", "b", "c"}) REQUIRE(c.on_commit(s, {1, "aaaaaaaaaaaaaaaa"}).ok());
  REQUIRE(c.on_lost("c", t0 + 1s).ok());
  auto done = c.step(t0 + 1s);
  CHECK_FALSE(done.abort);
  REQUIRE(done.committed);
  CHECK(done.committed->anchor_digest == "aaaaaaaaaaaaaaaa");
}
