// A phase is counted once: a site that sent COMMIT for a round and then
// lost track of it (a later round was planned or committed before its
// COMMITTED or ABORT arrived) holds its phase until the coordinator says
// which attempt committed that round. Checked with a fixed clock by the
// actions the participant machine orders, in order.
#include "daemon/tests/participant_fixture.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::daemon::participant_test;

namespace {

bool sends_ready(const ParticipantMachine::Actions& a) {
  for (const auto& k : kinds(a))
    if (k == "send ready to a") return true;
  return false;
}

// Site b committing round 1 (attempt 0, digest 2) when round 2 is planned:
// its COMMITTED was lost, and b catches up with its phase in doubt.
ParticipantMachine lost_round_1() {
  auto m = joined(0);
  to_committing(m, 1, kDigest2);  // its COMMIT went out
  REQUIRE(m.on_plan("a", plan(2, {"a", "c"}, {"b"})).ok());
  auto a = m.step(t0 + 10ms);
  // Declined, caught up, and the COMMIT asked again: a question now.
  CHECK(kinds(a) == std::vector<std::string>{"decline 2.0", "send state_request to a", "send commit to a"});
  CHECK((sent<CommitMessage>(a).round == 1 && sent<CommitMessage>(a).attempt == 0 &&
         sent<CommitMessage>(a).anchor_digest == kDigest2));
  CHECK(noted(a, "lost track of round 1 after sending its COMMIT (attempt 0)"));
  REQUIRE(m.where() == Where::catching_up);
  return m;
}

}  // namespace

TEST_CASE("a phase whose round committed its attempt is not offered again: the trainer moves on") {
  SECTION("the answer comes while the state is still on its way") {
    auto m = lost_round_1();
    REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false, 0}).ok());
    CHECK(noted(m.step(t0 + 20ms), "round 1 committed attempt 0 with this site's phase in it"));
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
    CHECK(kinds(asked) == std::vector<std::string>{"send commit to a"});  // asked again every resend interval
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
    CHECK(noted(m.step(t0 + 20ms), "round 1 did not commit attempt 0: this site's phase is still to be counted"));
    late_ready(m);
  }
  SECTION("its attempt was aborted") {
    auto m = lost_round_1();
    REQUIRE(m.on_abort("a", AbortMessage{1, 0, "a participant failed"}).ok());
    late_ready(m);
  }
  SECTION("a newer attempt of the round was planned") {
    auto m = lost_round_1();
    REQUIRE(m.on_plan("a", plan(1, {"a", "c"}, {}, 1)).ok());
    late_ready(m);
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
  // Not READY (in doubt), so left out of round 2: it observes it.
  REQUIRE(m.on_plan("a", plan(2, {"a", "c"}, {"b"})).ok());
  CHECK(kinds(m.step(t0 + 50ms)) == std::vector<std::string>{"observe"});
  REQUIRE(m.on_committed("a", CommittedMessage{1, kDigest2, false, 0}).ok());  // counted, mid-exchange
  CHECK(kinds(m.step(t0 + 60ms)).empty());
  m.on_exchange_done(2, 0, kDigest3);
  REQUIRE(m.on_committed("a", CommittedMessage{2, kDigest3, false, 0}).ok());
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
    CHECK(noted(held, "the job's last round is held; its end waits for the coordinator to say whether round 1 counted"));
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
      for (const auto& k : kinds(last)) questions += k == "send commit to a";
    }
    CHECK(m.where() == Where::finished);
    CHECK(questions <= 20);
    for (const auto& k : kinds(last)) CHECK(k.rfind("drop ", 0) != 0);
    CHECK(noted(last, "the job finished before the coordinator said whether round 1 (attempt 0) counted this site's "
                      "640 tokens"));
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
  CHECK_FALSE(sends_ready(again));  // READY goes to the new office holder, at once
  CHECK(kinds(again) == std::vector<std::string>{"send ready to c"});
  REQUIRE(m.on_committed("c", CommittedMessage{1, kDigest2, false, 0, 1, 640}).ok());
  auto counted = m.step(t0 + 30ms);
  CHECK(noted(counted, "round 1 committed attempt 0, which holds this site's phase"));
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
    CHECK_FALSE(noted(late, "which holds this site's phase"));
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
