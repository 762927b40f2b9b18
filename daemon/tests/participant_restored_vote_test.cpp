// A site that restarted after voting for a round whose outcome its journal
// never learned (every site down between the votes and the outcome), with a
// fixed clock: when that round's COMMITTED names the attempt and digest it
// voted for, it steps the round from its own round log instead of asking
// peers, who may all be in the same place; any other outcome, or a vote that
// is not of the round after the state it holds, leaves it catching up as
// before.
#include "daemon/tests/participant_fixture.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::daemon::participant_test;

namespace {

const PendingCommit kVote{3, 7, kDigest2, 1920, true};

CommittedMessage committed(std::uint64_t round, const std::string& digest, std::optional<std::uint64_t> attempt,
                           bool final = false) {
  CommittedMessage c;
  c.round = round;
  c.anchor_digest = digest;
  c.attempt = attempt;
  c.epoch = 1;
  c.final = final;
  return c;
}

// Site b restarted on its rebuilt state of round 2, its vote of round 3 restored.
ParticipantMachine restarted(const PendingCommit& vote = kVote, std::uint64_t held_round = 2) {
  ParticipantMachine m(options(), HeldState{held_round, kDigest1}, std::nullopt, 0, t0);
  m.on_restored_vote(vote);
  REQUIRE(m.where() == Where::catching_up);
  REQUIRE(kinds(m.step(t0)) == std::vector<std::string>{"send join to a", "send state_request to a"});
  return m;
}

}  // namespace

TEST_CASE("RESTORED VOTE: the committed round a restarted voter voted for is stepped from its round log") {
  ParticipantMachine m = restarted();
  // A peer asking meanwhile is told to wait: this site holds no current state.
  m.on_state_request("c", StateRequestMessage{"j", 2, kDigest1, 2});
  CHECK(kinds(m.step(t0 + 100ms)) == std::vector<std::string>{"offer to c: this site is catching up itself"});

  REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
  auto a = m.step(t0 + 200ms);
  CHECK(kinds(a) == std::vector<std::string>{"apply 3.7 from the round log"});
  CHECK(noted(a, "round 3 committed attempt 7, which this site voted for before it restarted"));
  CHECK(first<ApplyLoggedRound>(a).committed.anchor_digest == kDigest2);
  CHECK(m.where() == Where::applying);
  CHECK(m.heartbeat_phase() == "exchange");

  m.on_logged_applied({}, false);
  // The trainer, which waited for an anchor, gets round 3's; the peer that waited gets the state.
  CHECK(kinds(m.step(t0 + 300ms)) == std::vector<std::string>{"welcome 4", "offer to c"});
  CHECK(m.where() == Where::idle);
  REQUIRE(m.held());
  CHECK(m.held()->round == 3);
  CHECK(m.held()->digest == kDigest2);
  CHECK(m.known_committed() == 3);
  // Nothing is asked of the peers any more (the state was asked for at t0; a retry was due at t0 + 1 s).
  CHECK(kinds(m.step(t0 + 5s)).empty());
}

TEST_CASE("RESTORED VOTE: a COMMITTED without an attempt is stepped when its digest is the vote's") {
  ParticipantMachine m = restarted();
  REQUIRE(m.on_committed("a", committed(3, kDigest2, std::nullopt)).ok());
  CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"apply 3.7 from the round log"});
}

TEST_CASE("RESTORED VOTE: another outcome of the round is not stepped from the log: the site catches up") {
  SECTION("another attempt committed") {
    ParticipantMachine m = restarted();
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 8)).ok());
    CHECK(kinds(m.step(t0 + 200ms)).empty());
  }
  SECTION("another digest") {
    ParticipantMachine m = restarted();
    REQUIRE(m.on_committed("a", committed(3, kDigest3, 7)).ok());
    CHECK(kinds(m.step(t0 + 200ms)).empty());
  }
  SECTION("a later round committed first") {
    ParticipantMachine m = restarted();
    REQUIRE(m.on_committed("a", committed(4, kDigest3, 0)).ok());
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    CHECK(kinds(m.step(t0 + 200ms)).empty());
  }
  SECTION("the vote is not of the round after the held state") {
    ParticipantMachine m = restarted(kVote, 1);
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    CHECK(kinds(m.step(t0 + 200ms)).empty());
  }
}

TEST_CASE(
    "RESTORED VOTE: an ABORT of the voted attempt or a later PLAN leaves the vote; a successor may still commit it") {
  // The vote still counts in an election (the site reports it), and a
  // successor that never heard of the ABORT or the PLAN completes the
  // attempt: the voters are then the ones who can step it.
  SECTION("aborted") {
    ParticipantMachine m = restarted();
    REQUIRE(m.on_abort("a", AbortMessage{3, 7, "the coordinator restarted"}).ok());
    (void)m.step(t0 + 100ms);
    m.on_office("c");
    REQUIRE(m.on_committed("c", committed(3, kDigest2, 7)).ok());
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"apply 3.7 from the round log"});
  }
  SECTION("a later attempt planned, which this catching-up site declines") {
    ParticipantMachine m = restarted();
    REQUIRE(m.on_plan("a", plan(3, {"a", "c"}, {}, 8)).ok());
    (void)m.step(t0 + 100ms);
    m.on_office("c");
    REQUIRE(m.on_committed("c", committed(3, kDigest2, 7)).ok());
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"apply 3.7 from the round log"});
  }
}

TEST_CASE(
    "RESTORED VOTE: a state installed from a peer while catching up is stepped on; one of the voted round ends the "
    "vote") {
  SECTION("the round before the vote's, installed: the vote is stepped on it") {
    ParticipantMachine m = restarted(kVote, 1);  // restarted two rounds behind its vote
    m.on_state_offer("a", offer(2, kDigest1), t0 + 100ms);
    CHECK(kinds(m.step(t0 + 100ms)) == std::vector<std::string>{"receive from a"});
    m.on_state_arrived({2, kDigest1});
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"install", "welcome 3"});
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    // Its trainer was welcomed at round 3 with round 2's anchor: kept before the step.
    CHECK(kinds(m.step(t0 + 300ms)) == std::vector<std::string>{"keep anchor", "apply 3.7 from the round log"});
  }
  SECTION("the voted round itself, installed: nothing is stepped, and a later outcome is not taken for it") {
    ParticipantMachine m = restarted();
    m.on_state_offer("a", offer(3, kDigest2), t0 + 100ms);
    (void)m.step(t0 + 100ms);
    m.on_state_arrived({3, kDigest2});
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"install", "welcome 4"});
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    CHECK(kinds(m.step(t0 + 300ms)).empty());
    CHECK(m.held()->round == 3);
  }
}

TEST_CASE("RESTORED VOTE: a step from the log that fails leaves the site catching up, without the state it broke") {
  SECTION("the entry could not be read: the held state is intact") {
    ParticipantMachine m = restarted();
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    (void)m.step(t0 + 200ms);
    m.on_logged_applied(Status(Err::mismatch, "the round log has no Δ of round 3"), false);
    auto a = m.step(t0 + 300ms);
    CHECK(noted(a, "round 3 cannot be stepped from the round log: the round log has no Δ of round 3"));
    CHECK(m.where() == Where::catching_up);
    REQUIRE(m.held());
    CHECK(m.held()->round == 2);
    // The request names the state it still holds.
    CHECK(sent<StateRequestMessage>(a).held_round == std::optional<std::uint64_t>(2));
  }
  SECTION("the step gave another anchor: the state is no round's") {
    ParticipantMachine m = restarted();
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    (void)m.step(t0 + 200ms);
    m.on_logged_applied(Status(Err::mismatch, "stepping round 3 gives anchor 4444444444444444"), true);
    auto a = m.step(t0 + 300ms);
    CHECK(m.where() == Where::catching_up);
    CHECK_FALSE(m.held());
    CHECK_FALSE(sent<StateRequestMessage>(a).held_round);
  }
}

TEST_CASE("RESTORED VOTE: a state transfer in progress is dropped; a training coordinator's trainer keeps its anchor") {
  SECTION("a catching-up site receiving the state of the round before") {
    ParticipantMachine m = restarted();
    m.on_state_offer("a", offer(2, kDigest1), t0 + 100ms);
    CHECK(kinds(m.step(t0 + 100ms)) == std::vector<std::string>{"receive from a"});
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"drop transfer", "apply 3.7 from the round log"});
    m.on_logged_applied({}, false);
    CHECK(kinds(m.step(t0 + 300ms)) == std::vector<std::string>{"welcome 4"});
    // The dropped transfer's end, arriving late, does not replace the stepped state.
    m.on_state_arrived({2, kDigest1});
    CHECK(kinds(m.step(t0 + 400ms)).empty());
    CHECK(m.held()->round == 3);
  }
  SECTION("the coordinator, resumed on its checkpoint and training toward the round") {
    ParticipantMachine m(options("a"), HeldState{2, kDigest1}, HeldState{2, kDigest1}, 0, t0);
    m.on_restored_vote(kVote);
    REQUIRE(m.where() == Where::idle);
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"send join to a", "welcome 3"});
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    // Its trainer trains from round 2's anchor: kept before the step moves it.
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"keep anchor", "apply 3.7 from the round log"});
    m.on_logged_applied({}, false);
    // A trainer that may have begun training from round 2's anchor is offered round 3's, not given it.
    CHECK(kinds(m.step(t0 + 300ms)) == std::vector<std::string>{"move trainer 4"});
    CHECK(m.held()->round == 3);
  }
}

TEST_CASE("RESTORED VOTE: the job's last round stepped from the log ends the job; a checkpoint round is saved") {
  SECTION("final") {
    ParticipantMachine m = restarted();
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7, true)).ok());
    (void)m.step(t0 + 200ms);
    m.on_logged_applied({}, false);
    auto a = m.step(t0 + 300ms);
    CHECK(m.where() == Where::finished);
    CHECK(kinds(a).back() == "end finished with checkpoint");
  }
  SECTION("a checkpoint round") {
    ParticipantMachine m(options(), HeldState{2, kDigest1}, std::nullopt, 3, t0);
    m.on_restored_vote(kVote);
    (void)m.step(t0);
    REQUIRE(m.on_committed("a", committed(3, kDigest2, 7)).ok());
    (void)m.step(t0 + 200ms);
    m.on_logged_applied({}, false);
    CHECK(kinds(m.step(t0 + 300ms)) == std::vector<std::string>{"welcome 4", "checkpoint"});
  }
}
