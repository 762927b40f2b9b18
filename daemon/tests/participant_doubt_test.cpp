// A phase is counted once: a site whose phase went into an attempt of a
// round (its COMMIT sent, or an exchange that failed after it began) and
// that learns the round committed without learning by which attempt (its
// COMMITTED lost, or it was away while later rounds committed) holds its
// phase until a site's journal says which attempt committed that round.
// Checked with a fixed clock by the actions the participant machine
// orders, in order.
#include "daemon/tests/participant_fixture.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::daemon::participant_test;

namespace {

bool sends_ready(const ParticipantMachine::Actions& a) {
  for (const auto& k : kinds(a))
    if (k.rfind("send ready to", 0) == 0) return true;
  return false;
}

// The question about a round, as step() sends it: to every site of the job.
const std::vector<std::string> kAskEveryone{"send round_query to a", "send round_query to b", "send round_query to c"};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Site b committing round 1 (attempt 0, digest 2) when round 2 is planned:
// its COMMITTED was lost, and b catches up with its phase in doubt.
ParticipantMachine lost_round_1() {
  auto m = joined(0);
  to_committing(m, 1, kDigest2);  // its COMMIT went out
  REQUIRE(m.on_plan("a", plan(2, {"a", "c"}, {"b"})).ok());
  auto a = m.step(t0 + 10ms);
  // Declined, caught up, and every site asked which attempt committed round 1.
  CHECK(kinds(a) == concat({"decline 2.0", "send state_request to a"}, kAskEveryone));
  CHECK(sent<RoundQueryMessage>(a).round == 1);
  CHECK(noted(a, "lost track of round 1 after sending its COMMIT (attempt 0)"));
  CHECK(noted(a, "round 1 is committed, and this site does not know whether by the attempt that holds its phase (0)"));
  // What a vote reports: the COMMIT sent, until this site holds round 1.
  REQUIRE(m.pending_commit());
  CHECK((m.pending_commit()->round == 1 && m.pending_commit()->anchor_digest == kDigest2));
  REQUIRE(m.where() == Where::catching_up);
  return m;
}

}  // namespace

TEST_CASE("a phase whose round committed its attempt is not offered again: the trainer moves on") {
  SECTION("the answer comes while the state is still on its way") {
    auto m = lost_round_1();
    REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false, 0}).ok());
    CHECK(noted(m.step(t0 + 20ms), "round 1 committed attempt 0, which holds this site's phase: it is counted"));
    m.on_state_offer("a", offer(2, kDigest3), t0 + 30ms);
    m.on_state_arrived({2, kDigest3});
    auto in = m.step(t0 + 40ms);
    CHECK(kinds(in) == std::vector<std::string>{"receive from a", "keep anchor", "install", "release 3"});
    CHECK(m.trainer_round() == 3);
    CHECK_FALSE(m.phase());
    for (auto t : {1s, 2s, 5s}) CHECK_FALSE(sends_ready(m.step(t0 + t)));  // never READY for round 1's work again
  }
  SECTION("the answer comes after the state") {
    auto m = lost_round_1();
    m.on_state_offer("a", offer(1, kDigest2), t0 + 30ms);
    m.on_state_arrived({1, kDigest2});
    auto held = m.step(t0 + 40ms);
    CHECK(kinds(held) == std::vector<std::string>{"receive from a", "keep anchor", "install"});  // no READY: in doubt
    auto asked = m.step(t0 + 400ms);
    CHECK(kinds(asked) == kAskEveryone);  // asked again every resend interval
    REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false, 0}).ok());
    CHECK(kinds(m.step(t0 + 500ms)) == std::vector<std::string>{"release 2"});
    CHECK_FALSE(sends_ready(m.step(t0 + 2s)));
  }
}

TEST_CASE("a phase whose attempt did not commit its round is late work, offered again") {
  auto late_ready = [](ParticipantMachine& m) {
    m.on_state_offer("a", offer(1, kDigest3), t0 + 30ms);
    m.on_state_arrived({1, kDigest3});
    auto a = m.step(t0 + 1s);
    REQUIRE(sends_ready(a));
    CHECK((sent<ReadyMessage>(a).round == 2 && sent<ReadyMessage>(a).anchor_round == 1 &&
           sent<ReadyMessage>(a).tokens == 640));
    CHECK(m.phase());
  };
  SECTION("another attempt committed it") {
    auto m = lost_round_1();
    REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest3, false, 1}).ok());
    CHECK(noted(m.step(t0 + 20ms),
                "round 1 committed attempt 1, which does not hold this site's phase: it is still to be counted"));
    late_ready(m);
  }
  SECTION("a site's journal says another attempt committed it") {
    auto m = lost_round_1();
    m.on_round_outcome("c", RoundOutcomeMessage{1, 1, kDigest3});
    CHECK(noted(m.step(t0 + 20ms), "round 1 committed attempt 1 (c's journal), which does not hold this site's phase"));
    late_ready(m);
  }
  SECTION("an ABORT of its attempt, or a newer attempt planned, does not say which attempt committed the round") {
    // Round 1 is committed (round 2 was planned): by another attempt, or by
    // this one, which a successor may complete after it was aborted.
    auto m = lost_round_1();
    REQUIRE(m.on_abort("a", AbortMessage{1, 0, "a participant failed"}).ok());
    REQUIRE(m.on_plan("a", plan(1, {"a", "c"}, {}, 1)).ok());
    m.on_state_offer("a", offer(1, kDigest3), t0 + 30ms);
    m.on_state_arrived({1, kDigest3});
    auto held = m.step(t0 + 1s);
    CHECK_FALSE(sends_ready(held));
    CHECK(kinds(held) == concat({"receive from a", "keep anchor", "install"}, kAskEveryone));
    m.on_round_outcome("b", RoundOutcomeMessage{1, 1, kDigest3});  // this site's own journal may answer too
    auto a = m.step(t0 + 1100ms);
    REQUIRE(sends_ready(a));
    CHECK(sent<ReadyMessage>(a).anchor_round == 1);
  }
  SECTION("an answer from a site outside the job is not taken") {
    auto m = lost_round_1();
    m.on_round_outcome("x", RoundOutcomeMessage{1, 0, kDigest2});
    m.on_state_offer("a", offer(1, kDigest2), t0 + 30ms);
    m.on_state_arrived({1, kDigest2});
    CHECK_FALSE(sends_ready(m.step(t0 + 1s)));
    CHECK(m.phase());
  }
  SECTION("a COMMITTED that does not name its attempt decides nothing") {
    auto m = lost_round_1();
    REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false}).ok());
    m.on_state_offer("a", offer(1, kDigest2), t0 + 30ms);
    m.on_state_arrived({1, kDigest2});
    CHECK_FALSE(sends_ready(m.step(t0 + 1s)));
    CHECK(m.phase());
  }
}

TEST_CASE("the answer that comes while the site observes a later round releases the trainer once that round is in") {
  auto m = lost_round_1();
  m.on_state_offer("a", offer(1, kDigest2), t0 + 30ms);
  m.on_state_arrived({1, kDigest2});
  (void)m.step(t0 + 40ms);
  // Not READY (in doubt), so left out of round 2's next attempt (its first was declined while this
  // site caught up): it observes it.
  REQUIRE(m.on_plan("a", plan(2, {"a", "c"}, {"b"}, 1)).ok());
  CHECK(kinds(m.step(t0 + 50ms)) == std::vector<std::string>{"observe"});
  REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false, 0}).ok());  // counted, mid-exchange
  CHECK(kinds(m.step(t0 + 60ms)).empty());
  m.on_exchange_done(2, 1, kDigest3);
  REQUIRE(m.on_committed("a", CommittedMessage{2, kDigest3, false, 1}).ok());
  CHECK(kinds(m.step(t0 + 70ms)) == std::vector<std::string>{"apply"});  // its trainer waits: no anchor to keep
  m.on_applied({});
  CHECK(kinds(m.step(t0 + 80ms)) == std::vector<std::string>{"release 3"});  // from round 2's state, the held one
  CHECK_FALSE(m.phase());
}

TEST_CASE("a plan of round R means round R - 1 is committed: an offer of an older state is not taken") {
  auto m = lost_round_1();  // round 2 planned: round 1 is committed
  CHECK(m.known_committed() == 1);
  m.on_state_offer("a", offer(0, kDigest1), t0 + 30ms);
  CHECK(noted(m.step(t0 + 40ms), "a offers round 0, but round 1 is committed; asking again"));
}

TEST_CASE("the job's end waits for the answer about a doubted phase, a few questions at most") {
  auto finished_in_doubt = [] {
    auto m = joined(0);
    to_committing(m, 1, kDigest2);
    REQUIRE(m.on_committed("a", CommittedMessage{2, kDigest3, true, 0}).ok());
    auto a = m.step(t0 + 10ms);
    CHECK(noted(a, "lost track of round 1 after sending its COMMIT (attempt 0)"));
    m.on_state_offer("a", offer(2, kDigest3), t0 + 20ms);
    m.on_state_arrived({2, kDigest3});
    auto held = m.step(t0 + 30ms);
    CHECK(noted(held, "the job's last round is held; its end waits for a site to say whether round 1 counted"));
    CHECK(m.where() == Where::idle);
    return m;
  };
  SECTION("answered: counted, the trainer told to stop, nothing dropped") {
    auto m = finished_in_doubt();
    REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false, 0}).ok());
    auto end = m.step(t0 + 40ms);
    CHECK(kinds(end) == std::vector<std::string>{"release 3 stop", "end finished with checkpoint"});
    CHECK(m.where() == Where::finished);
  }
  SECTION("answered: not counted, so dropped with its reason") {
    auto m = finished_in_doubt();
    REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest3, false, 1}).ok());
    auto end = m.step(t0 + 40ms);
    CHECK(kinds(end) == std::vector<std::string>{"drop 640", "release 3 stop", "end finished with checkpoint"});
  }
  SECTION("never answered: it ends after the last question, drops nothing it may have counted, and says so") {
    auto m = finished_in_doubt();
    ParticipantMachine::Actions last;
    int questions = 0;
    for (int i = 1; i <= 40 && m.where() != Where::finished; ++i) {
      last = m.step(t0 + 30ms + i * 300ms);
      for (const auto& k : kinds(last)) questions += k == "send round_query to a";
    }
    CHECK(m.where() == Where::finished);
    CHECK(questions <= 20);
    for (const auto& k : kinds(last)) CHECK(k.rfind("drop ", 0) != 0);
    CHECK(noted(last, "the job finished before any site said whether round 1 counted this site's 640 tokens"));
    CHECK(kinds(m.step(t0 + 60s)).empty());  // and asks nothing any more
  }
}

TEST_CASE("a successor completing an attempt whose exchange failed here counts the phase in it, once") {
  // Site b's exchange of round 1 attempt 0 failed after its Δ went out (the
  // coordinator died mid all-gather); a successor completed attempt 0 from
  // another site's result.
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());
  (void)m.step(t0);
  m.on_exchange_done(1, 0, Result<std::string>(Status(Err::io, "peer a: connection reset")));
  auto failed = m.step(t0 + 10ms);
  CHECK(sent<FailedMessage>(failed).attempt == 0);
  REQUIRE(m.where() == Where::idle);
  m.on_office("c");  // c took office
  auto again = m.step(t0 + 20ms);
  CHECK(kinds(again) == std::vector<std::string>{"send ready to c"});  // to the new office holder, at once
  REQUIRE(m.on_committed("c", CommittedMessage{1, kDigest2, false, 0, 1, 640}).ok());
  auto counted = m.step(t0 + 30ms);
  CHECK(noted(counted, "round 1 committed attempt 0, which holds this site's phase: it is counted"));
  m.on_state_offer("c", offer(1, kDigest2), t0 + 40ms);
  m.on_state_arrived({1, kDigest2});
  CHECK(kinds(m.step(t0 + 50ms)) == std::vector<std::string>{"receive from c", "keep anchor", "install", "release 2"});
  for (auto t : {1s, 2s}) {
    auto later = m.step(t0 + t);
    for (const auto& k : kinds(later)) CHECK(k.rfind("send ready", 0) != 0);  // never offered again
  }

  SECTION("another attempt's commit leaves it late work") {
    auto n = joined(0);
    n.on_phase({1, 0, 640, 1.5});
    (void)n.step(t0);
    REQUIRE(n.on_plan("a", plan(1, {"a", "b", "c"})).ok());
    (void)n.step(t0);
    n.on_exchange_done(1, 0, Result<std::string>(Status(Err::io, "reset")));
    (void)n.step(t0 + 10ms);
    REQUIRE(n.on_committed("a", CommittedMessage{1, kDigest2, false, 1}).ok());
    auto late = n.step(t0 + 20ms);
    CHECK(noted(late, "which does not hold this site's phase"));
    n.on_state_offer("a", offer(1, kDigest2), t0 + 30ms);
    n.on_state_arrived({1, kDigest2});
    auto after = n.step(t0 + 1s);
    CHECK(sent<ReadyMessage>(after).round == 2);  // carried into round 2
    CHECK(sent<ReadyMessage>(after).anchor_round == 1);
  }
}

TEST_CASE("an observer's COMMIT and a participant's are both what a vote reports as pending, until settled") {
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  PlanMessage observed = plan(1, {"a", "c"}, {"b"}, 3);  // b observes attempt 3
  observed.tokens = 1280;
  REQUIRE(m.on_plan("a", observed).ok());
  m.on_exchange_done(1, 3, std::string(kDigest2));
  auto a = m.step(t0 + 10ms);
  CHECK(sent<CommitMessage>(a).attempt == 3);  // an observer acknowledges too
  REQUIRE(m.pending_commit());
  CHECK((m.pending_commit()->round == 1 && m.pending_commit()->attempt == 3 &&
         m.pending_commit()->anchor_digest == kDigest2 && m.pending_commit()->tokens == 1280));
  CHECK(m.newest_plan() == std::optional<std::pair<std::uint64_t, std::uint64_t>>({1, 3}));
  // While an election is open, nothing goes to a coordinator.
  m.on_office("");
  auto quiet = m.step(t0 + 1s);
  for (const auto& k : kinds(quiet)) CHECK(k == "send commit to ");
  m.on_office("c");  // the successor aborts the attempt
  REQUIRE(m.on_abort("c", AbortMessage{1, 3, "coordinator failover", 1}).ok());
  (void)m.step(t0 + 1100ms);
  CHECK_FALSE(m.pending_commit());
}

TEST_CASE(
    "a site whose exchange failed and that was away while later rounds committed asks before counting its phase") {
  // Site b's exchange of round 1 attempt 0 failed after its Δ went out; it
  // was then cut off while a successor completed attempt 0 and round 2
  // committed. It comes back to a PLAN of round 3: it does not know whether
  // round 1 counted its phase, and the state it catches up to (round 2) does
  // not say.
  auto away = [] {
    auto m = joined(0);
    m.on_phase({1, 0, 640, 1.5});
    (void)m.step(t0);
    REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());
    (void)m.step(t0);
    m.on_exchange_done(1, 0, Result<std::string>(Status(Err::io, "peer a: connection reset")));
    (void)m.step(t0 + 10ms);
    CHECK_FALSE(m.pending_commit());  // it sent no COMMIT: nothing for a vote
    m.on_office("c");
    REQUIRE(m.on_plan("c", plan(3, {"a", "c"}, {}, 65536)).ok());
    auto back = m.step(t0 + 20s);
    CHECK(kinds(back) == concat({"send state_request to c"}, kAskEveryone));
    CHECK(noted(back,
                "round 1 is committed, and this site does not know whether by the attempt that holds its phase (0)"));
    m.on_state_offer("c", offer(2, kDigest3), t0 + 20s + 10ms);
    m.on_state_arrived({2, kDigest3});
    auto installed = m.step(t0 + 20s + 20ms);
    CHECK(kinds(installed) == std::vector<std::string>{"receive from c", "keep anchor", "install"});  // no READY
    for (auto t : {21s, 22s}) {
      auto held = m.step(t0 + t);
      CHECK_FALSE(sends_ready(held));
      CHECK(kinds(held) == kAskEveryone);
    }
    CHECK(m.phase());
    return m;
  };
  SECTION("the attempt that holds its phase committed round 1: the trainer moves on, the phase is not offered again") {
    auto m = away();
    m.on_round_outcome("a", RoundOutcomeMessage{1, 0, kDigest2});
    auto released = m.step(t0 + 23s);
    CHECK(noted(released, "round 1 committed attempt 0 (a's journal), which holds this site's phase: it is counted"));
    CHECK(kinds(released) == std::vector<std::string>{"release 3"});
    m.on_round_outcome("c", RoundOutcomeMessage{1, 0, kDigest2});  // a second answer changes nothing
    for (auto t : {24s, 25s}) CHECK(kinds(m.step(t0 + t)).empty());
  }
  SECTION("another attempt committed round 1: the phase is late work, carried into round 3") {
    auto m = away();
    m.on_round_outcome("c", RoundOutcomeMessage{1, 1, kDigest2});
    auto late = m.step(t0 + 23s);
    REQUIRE(sends_ready(late));
    CHECK((sent<ReadyMessage>(late).round == 3 && sent<ReadyMessage>(late).anchor_round == 1 &&
           sent<ReadyMessage>(late).tokens == 640));
  }
  SECTION("an answer about another round settles nothing") {
    auto m = away();
    m.on_round_outcome("a", RoundOutcomeMessage{2, 0, kDigest3});
    CHECK(kinds(m.step(t0 + 23s)) == kAskEveryone);
  }
}

TEST_CASE("an exchange that failed in a round not yet committed leaves the phase free for the round's next attempt") {
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());
  (void)m.step(t0);
  m.on_exchange_done(1, 0, Result<std::string>(Status(Err::io, "reset")));
  auto failed = m.step(t0 + 10ms);
  CHECK(kinds(failed) ==
        std::vector<std::string>{"send failed to a", "send ready to a"});  // no question: round 1 is open
  REQUIRE(m.on_abort("a", AbortMessage{1, 0, "b could not finish the exchange"}).ok());
  (void)m.step(t0 + 20ms);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"}, {}, 1)).ok());
  CHECK(kinds(m.step(t0 + 30ms)) == std::vector<std::string>{"exchange"});
  m.on_exchange_done(1, 1, std::string(kDigest2));
  (void)m.step(t0 + 40ms);
  REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false, 1}).ok());
  CHECK(kinds(m.step(t0 + 50ms)) == std::vector<std::string>{"apply"});
  m.on_applied({});
  CHECK(kinds(m.step(t0 + 60ms)) == std::vector<std::string>{"release 2"});
  for (auto t : {1s, 2s}) CHECK(kinds(m.step(t0 + t)).empty());  // nothing asked: settled by its own commit
}

TEST_CASE("only an answer about the round asked about is taken, and only with the digest this site holds for it") {
  SECTION("an answer about the round being exchanged settles nothing: its own COMMITTED does") {
    auto m = joined(0);
    m.on_phase({1, 0, 640, 1.5});
    (void)m.step(t0);
    REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());
    (void)m.step(t0);
    m.on_round_outcome("c", RoundOutcomeMessage{1, 0, kDigest2});  // stray, or forged: round 1 is not committed
    m.on_exchange_done(1, 0, Result<std::string>(Status(Err::io, "reset")));
    auto failed = m.step(t0 + 10ms);
    CHECK(kinds(failed) == std::vector<std::string>{"send failed to a", "send ready to a"});  // still to be counted
    REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false, 0}).ok());  // a successor completed it
    CHECK(noted(m.step(t0 + 20ms), "round 1 committed attempt 0, which holds this site's phase: it is counted"));
  }
  SECTION("an answer whose digest is not the one this site holds for that round is not taken") {
    auto m = lost_round_1();
    m.on_state_offer("a", offer(1, kDigest2), t0 + 30ms);
    m.on_state_arrived({1, kDigest2});
    (void)m.step(t0 + 40ms);
    m.on_round_outcome("c", RoundOutcomeMessage{1, 1, kDigest3});
    auto a = m.step(t0 + 400ms);
    CHECK(noted(a, "c says round 1 committed anchor 3333333333333333; this site holds 2222222222222222"));
    CHECK(kinds(a) == kAskEveryone);  // still asking
    m.on_round_outcome("a", RoundOutcomeMessage{1, 0, kDigest2});
    CHECK(kinds(m.step(t0 + 500ms)) == std::vector<std::string>{"release 2"});
  }
}

TEST_CASE("the job's end waits its own questions, however long the doubt lasted before") {
  auto m = lost_round_1();
  m.on_state_offer("a", offer(1, kDigest2), t0 + 30ms);
  m.on_state_arrived({1, kDigest2});
  int questions = 0;
  for (int i = 1; i <= 40; ++i)  // 40 questions unanswered during the job
    for (const auto& k : kinds(m.step(t0 + i * 300ms))) questions += k == "send round_query to a";
  CHECK(questions >= 30);
  REQUIRE(m.on_committed("a", CommittedMessage{2, kDigest3, true, 0}).ok());  // the last round, without b
  m.on_state_offer("a", offer(2, kDigest3), t0 + 13s);
  m.on_state_arrived({2, kDigest3});
  auto waits = m.step(t0 + 13100ms);
  CHECK(noted(waits, "its end waits for a site to say whether round 1 counted this site's phase"));
  CHECK(m.where() == Where::idle);
  m.on_round_outcome("c", RoundOutcomeMessage{1, 0, kDigest2});  // answered after 1 question of the end's 20
  auto end = m.step(t0 + 13200ms);
  CHECK(kinds(end) == std::vector<std::string>{"release 3 stop", "end finished with checkpoint"});
}
