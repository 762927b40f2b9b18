// The site's side of a round with a fixed clock: READY, the exchange,
// COMMIT and COMMITTED, ABORTs and lost messages, late work, the last round,
// each checked by the actions the participant machine orders (in order) and
// what they carry, including the interleavings the end-to-end tests once
// found the hard way.
#include "daemon/tests/participant_fixture.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::daemon::participant_test;

TEST_CASE("a round: READY (resent until a PLAN), the exchange, COMMIT, COMMITTED, the step, the trainer released") {
  auto m = joined(2);
  m.on_phase({3, 0, 0, std::nan("")});
  auto ready = m.step(t0 + 1s);
  CHECK(kinds(ready) == std::vector<std::string>{"send ready to a"});
  const auto& r = sent<ReadyMessage>(ready);
  CHECK((r.round == 3 && r.anchor_round == 3 && r.inner_steps == 20));
  CHECK(r.tokens == 1);  // at least 1: token weighting never sees 0
  CHECK(r.loss == 0.0);  // a non-finite loss is not sent
  CHECK(m.heartbeat_phase() == "ready");
  CHECK(kinds(m.step(t0 + 1200ms)).empty());
  CHECK(kinds(m.step(t0 + 1300ms)) == std::vector<std::string>{"send ready to a"});

  REQUIRE(m.on_plan("a", counting(plan(3, {"a", "b", "c"}), "b", 1, 3)).ok());
  auto ex = m.step(t0 + 1400ms);
  CHECK(kinds(ex) == std::vector<std::string>{"exchange"});
  CHECK(first<StartExchange>(ex).plan.round == 3);
  CHECK(m.where() == Where::exchanging);
  CHECK(m.heartbeat_phase() == "exchange");
  CHECK(kinds(m.step(t0 + 2s)).empty());  // no READY while exchanging

  m.on_exchange_done(3, 0, kDigest2);
  auto commit = m.step(t0 + 2s);
  // On disk first: the record of what this site voted for goes with the COMMIT.
  CHECK(kinds(commit) == std::vector<std::string>{"journal and send commit to a"});
  CHECK((sent<CommitMessage>(commit).round == 3 && sent<CommitMessage>(commit).anchor_digest == kDigest2));
  const auto& pending = first<JournalCommit>(commit).pending;
  CHECK((pending.round == 3 && pending.attempt == 0 && pending.anchor_digest == kDigest2 && pending.participant));
  CHECK(kinds(m.step(t0 + 2200ms)).empty());
  CHECK(kinds(m.step(t0 + 2300ms)) ==
        std::vector<std::string>{"send commit to a"});  // the coordinator may have missed it

  REQUIRE(m.on_committed("a", {3, kDigest2, false}).ok());
  auto apply = m.step(t0 + 2400ms);
  CHECK(kinds(apply) == std::vector<std::string>{"apply"});
  CHECK(first<ApplyRound>(apply).participant);
  CHECK(m.where() == Where::applying);
  // The vote stays pending (journaled) while the step runs, until the round is recorded.
  REQUIRE(m.pending_commit());
  CHECK((m.pending_commit()->round == 3 && m.pending_commit()->anchor_digest == kDigest2));
  m.on_applied({});
  CHECK_FALSE(m.pending_commit());
  CHECK(kinds(m.step(t0 + 2400ms)) == std::vector<std::string>{"release 4"});
  CHECK(m.where() == Where::idle);
  CHECK(m.held()->round == 3);
  CHECK(m.held()->digest == kDigest2);
  CHECK(m.trainer_round() == 4);
  CHECK_FALSE(m.phase());
}

TEST_CASE("checkpoints follow every N committed rounds") {
  ParticipantMachine m(options("a"), std::nullopt, HeldState{0, ""}, 2, t0);
  m.on_initial_parameters({0, kDigest1});
  (void)m.step(t0);
  std::vector<std::vector<std::string>> after;
  for (std::uint64_t round = 1; round <= 3; ++round) {
    m.on_phase({round, 0, 10, 1.0});
    (void)m.step(t0);
    REQUIRE(m.on_plan("a", counting(plan(round, {"a", "b"}), "a", 10, round)).ok());
    m.on_exchange_done(round, 0, kDigest2);
    REQUIRE(m.on_committed("a", {round, kDigest2, false}).ok());
    (void)m.step(t0);
    m.on_applied({});
    after.push_back(kinds(m.step(t0)));
  }
  CHECK(after[0] == std::vector<std::string>{"release 2"});
  CHECK(after[1] == std::vector<std::string>{"release 3", "checkpoint"});
  CHECK(after[2] == std::vector<std::string>{"release 4"});
}

TEST_CASE("a COMMITTED with another digest than this site's, or for a round it had no part in, means catching up") {
  SECTION("another digest: nothing is applied") {
    auto m = joined(0);
    to_committing(m, 1, kDigest2);
    REQUIRE(m.on_committed("a", {1, kDigest3, false}).ok());
    auto a = m.step(t0);
    // The COMMITTED names no attempt: whether it holds this site's phase is asked.
    CHECK(kinds(a) == std::vector<std::string>{"send state_request to a", "send round_query to a",
                                               "send round_query to b", "send round_query to c"});
    CHECK(noted(a, "this site computed anchor 2222222222222222 for round 1, the committed one is 3333333333333333"));
    CHECK(m.where() == Where::catching_up);
    CHECK(m.held()->round == 0);
  }
  SECTION("a round without this site") {
    auto m = joined(0);
    REQUIRE(m.on_committed("a", {1, kDigest3, false}).ok());
    auto a = m.step(t0);
    CHECK(kinds(a) == std::vector<std::string>{"send state_request to a"});
    CHECK(noted(a, "round 1 was committed without this site"));
  }
  SECTION("an old or repeated COMMITTED changes nothing") {
    auto m = joined(4);
    REQUIRE(m.on_committed("a", {4, kDigest1, false}).ok());
    REQUIRE(m.on_committed("a", {2, kDigest3, false}).ok());
    CHECK(kinds(m.step(t0)).empty());
    CHECK(m.where() == Where::idle);
  }
}

TEST_CASE("an ABORT: while exchanging the exchange unwinds first; while committing READY goes out again at once") {
  SECTION("exchanging") {
    auto m = joined(0);
    m.on_phase({1, 0, 640, 1.5});
    (void)m.step(t0);
    REQUIRE(m.on_plan("a", plan(1, {"a", "b"})).ok());
    (void)m.step(t0);
    REQUIRE(m.on_abort("a", {1, 0, "peer c: no data"}).ok());
    auto a = m.step(t0 + 100ms);
    // Recorded, and the exchange given up at once (not at its timeout); no
    // READY while the all-reduce still unwinds.
    CHECK(kinds(a) == std::vector<std::string>{"aborted 1.0", "cancel 1.0"});
    CHECK(std::get<participant::CancelExchange>(a.actions[1]).why == "aborted: peer c: no data");
    CHECK(recorded<history::Aborted>(a).reason == "peer c: no data");
    CHECK(noted(a, "round 1 aborted: peer c: no data"));
    CHECK(m.where() == Where::unwinding);
    m.on_exchange_done(1, 0, kDigest2);  // its result is discarded
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"send ready to a"});
    CHECK(m.where() == Where::idle);
  }
  SECTION("committing") {
    auto m = joined(0);
    to_committing(m, 1, kDigest2);
    REQUIRE(m.on_abort("a", {1, 0, "anchor digests differ"}).ok());
    CHECK(kinds(m.step(t0 + 100ms)) == std::vector<std::string>{"aborted 1.0", "send ready to a"});
    CHECK(m.where() == Where::idle);
    CHECK(m.held()->round == 0);
  }
  SECTION("an ABORT of another round is ignored") {
    auto m = joined(0);
    to_committing(m, 1, kDigest2);
    REQUIRE(m.on_abort("a", {2, 0, "?"}).ok());
    CHECK(m.where() == Where::committing);
  }
}

TEST_CASE("a plan while an aborted exchange unwinds waits for it, then runs") {
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());
  (void)m.step(t0);
  REQUIRE(m.on_abort("a", {1, 0, "peer c: reset"}).ok());
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"}, {}, 1)).ok());
  REQUIRE(m.on_plan("a", plan(1, {"a", "b"}, {}, 2)).ok());  // attempt 1 never began here: declined
  CHECK(kinds(m.step(t0)) ==
        std::vector<std::string>{"aborted 1.0", "cancel 1.0", "decline 1.1"});  // not two exchanges at once
  m.on_exchange_done(1, 0, Status(Err::io, "peer c: reset"));
  auto next = m.step(t0);
  CHECK(kinds(next) == std::vector<std::string>{"exchange"});
  CHECK(first<StartExchange>(next).plan.attempt == 2);
  // The first attempt's failure is not reported: the coordinator moved on.
  CHECK(m.where() == Where::exchanging);
}

TEST_CASE("a late ABORT of an older attempt leaves the newer attempt's exchange running") {
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b"}, {}, 1)).ok());  // attempt 1 overtook attempt 0's ABORT
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"exchange"});
  REQUIRE(m.on_abort("a", {1, 0, "peer c: reset"}).ok());
  CHECK(kinds(m.step(t0)).empty());
  CHECK(m.where() == Where::exchanging);
  REQUIRE(m.on_abort("a", {1, 1, "peer b: reset"}).ok());  // its own ABORT is taken
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"aborted 1.1", "cancel 1.1"});
  CHECK(m.where() == Where::unwinding);
}

TEST_CASE("an ABORT while an exchange unwinds with a plan queued behind it ends that plan too") {
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b"}, {}, 1)).ok());  // attempt 0's ABORT was lost
  REQUIRE(m.on_abort("a", {1, 1, "peer c: reset"}).ok());    // this one is attempt 1's
  // The new PLAN gave attempt 0's exchange up; its ABORT ends the plan queued behind.
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"cancel 1.0", "aborted 1.1", "decline 1.1"});
  m.on_exchange_done(1, 0, Status(Err::io, "peer c: reset"));
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"send ready to a"});
  CHECK(m.where() == Where::idle);
}

TEST_CASE("a new attempt's PLAN without the ABORT (lost) supersedes the exchange in flight") {
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());  // the same plan again: nothing new
  CHECK(m.where() == Where::exchanging);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b"}, {}, 1)).ok());
  CHECK(m.where() == Where::unwinding);
  m.on_exchange_done(1, 1, kDigest2);  // not the exchange that runs: ignored
  CHECK(m.where() == Where::unwinding);
  m.on_exchange_done(1, 0, Status(Err::io, "given up"));
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"cancel 1.0", "exchange"});
  // A late repeat of attempt 0 (its queued copy) does not replace attempt 1.
  REQUIRE(m.on_plan("a", plan(1, {"a", "b", "c"})).ok());
  CHECK(m.where() == Where::exchanging);
  REQUIRE(m.plan());
  CHECK(m.plan()->attempt == 1);
  CHECK(m.step(t0).actions.empty());
}

TEST_CASE("a lost COMMITTED and the round planned again: the old attempt is void, the new one runs") {
  auto m = joined(0);
  to_committing(m, 1, kDigest2);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b"}, {}, 1)).ok());
  auto a = m.step(t0);
  CHECK(kinds(a) == std::vector<std::string>{"exchange"});
  CHECK(noted(a, "round 1 is planned again (attempt 1): this site's attempt 0 is void"));
  m.on_exchange_done(1, 1, kDigest3);
  auto commit = m.step(t0);
  CHECK(sent<CommitMessage>(commit).attempt == 1);
  CHECK(sent<CommitMessage>(commit).anchor_digest == kDigest3);
}

TEST_CASE("a plan for a round beyond the next one: catching up, but only after the exchange in flight ends") {
  SECTION("idle") {
    auto m = joined(0);
    REQUIRE(m.on_plan("a", plan(3, {"a", "c"})).ok());
    auto a = m.step(t0);
    CHECK(kinds(a) == std::vector<std::string>{"send state_request to a"});
    CHECK(noted(a, "PLAN of round 3 while this site holds round 0"));
  }
  SECTION("exchanging: the state would pull the exchange's buffers away") {
    auto m = joined(0);
    m.on_phase({1, 0, 640, 1.5});
    (void)m.step(t0);
    REQUIRE(m.on_plan("a", plan(1, {"a", "b"})).ok());
    (void)m.step(t0);
    REQUIRE(m.on_plan("a", plan(3, {"a", "c"}, {"b"})).ok());
    CHECK(m.where() == Where::unwinding);
    // Round 1 is committed, perhaps by the attempt this site's Δ went into: asked.
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"decline 3.0", "cancel 1.0", "send round_query to a",
                                                        "send round_query to b", "send round_query to c"});
    m.on_state_offer("a", offer(2, kDigest3), t0);  // not asked for yet: not taken
    CHECK(kinds(m.step(t0)).empty());
    m.on_exchange_done(1, 0, kDigest2);
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"send state_request to a"});
    CHECK(m.where() == Where::catching_up);
  }
}

TEST_CASE("a late site observes the round, applies it keeping its trainer's anchor, and carries its work on") {
  auto m = joined(0);
  // Left out of round 1 (its phase is not done): it receives the average.
  REQUIRE(m.on_plan("a", plan(1, {"a", "c"}, {"b"})).ok());
  auto obs = m.step(t0);
  CHECK(kinds(obs) == std::vector<std::string>{"observe"});
  // COMMITTED overtakes the end of its exchange: applied once that is in.
  REQUIRE(m.on_committed("a", {1, kDigest2, false}).ok());
  CHECK(kinds(m.step(t0)).empty());
  m.on_exchange_done(1, 0, kDigest2);
  auto apply = m.step(t0);
  CHECK(kinds(apply) == std::vector<std::string>{"keep anchor", "apply"});
  CHECK_FALSE(first<ApplyRound>(apply).participant);
  CHECK_FALSE(first<KeepTrainerAnchor>(apply).replaced);
  m.on_applied({});
  CHECK(kinds(m.step(t0)).empty());  // its trainer goes on from the anchor of round 1
  CHECK(m.trainer_round() == 1);
  m.on_phase({1, 0, 640, 1.2});
  auto late = m.step(t0 + 1s);
  CHECK(kinds(late) == std::vector<std::string>{"send ready to a"});
  CHECK((sent<ReadyMessage>(late).round == 2 && sent<ReadyMessage>(late).anchor_round == 1));
  CHECK(noted(late, "late work joins round 2: trained from the anchor of round 1"));
  // Included in round 2: after the step the trainer continues from the anchor of round 3.
  REQUIRE(m.on_plan("a", plan(2, {"a", "b", "c"}, {}, 0, 1)).ok());
  m.on_exchange_done(2, 0, kDigest3);
  REQUIRE(m.on_committed("a", {2, kDigest3, false}).ok());
  CHECK(kinds(m.step(t0 + 2s)) == std::vector<std::string>{"exchange", "apply"});
  m.on_applied({});
  CHECK(kinds(m.step(t0 + 2s)) == std::vector<std::string>{"release 3"});
}

TEST_CASE("late work is dropped under drop, past max_rounds_late, and always with streaming") {
  auto late_by = [](ParticipantOptions o, std::uint64_t rounds) {
    auto m = joined(rounds, o);
    m.on_phase({1, 2, 500, 1.0});  // trained from the anchor of round 1
    return m.step(t0);
  };
  auto o = options();
  CHECK(kinds(late_by(o, 2)) == std::vector<std::string>{"send ready to a"});  // carry, 2 rounds late
  o.straggler.max_rounds_late = 2;
  auto past = late_by(o, 3);
  CHECK(kinds(past) == std::vector<std::string>{"drop 500", "release 4"});
  CHECK(noted(past,
              "dropped this site's late work: 500 tokens trained from the anchor of round 1 (3 round(s) late, "
              "policy carry)"));
  CHECK(recorded<history::Dropped>(past).round == 1);
  CHECK(recorded<history::Dropped>(past).site == "b");
  CHECK(recorded<history::Dropped>(past).tokens == 500);
  CHECK(recorded<history::Dropped>(past).reason == "3 round(s) late, policy carry");
  o = options();
  o.straggler.policy = diloco::StragglerPolicy::drop;
  auto dropped = late_by(o, 1);
  CHECK(kinds(dropped) == std::vector<std::string>{"drop 500", "release 2"});
  CHECK(noted(dropped, "policy drop"));
  o = options();
  o.fragments = 4;
  auto fragment = late_by(o, 1);
  CHECK(kinds(fragment) == std::vector<std::string>{"drop 500", "release 2"});
  CHECK(noted(fragment,
              "dropped this site's late fragment 2 of round 1: 500 tokens (1 round(s) late; with streaming "
              "a late fragment is always dropped)"));
}

TEST_CASE("work no round took when the job finishes is dropped with its reason, not lost silently") {
  auto m = joined(0);
  // b is left out of round 1 (the last) as a straggler, then its phase comes in.
  REQUIRE(m.on_plan("a", plan(1, {"a", "c"}, {"b"})).ok());
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"observe"});
  m.on_phase({1, 0, 640, 1.5});
  m.on_exchange_done(1, 0, Result<std::string>(std::string(kDigest2)));
  (void)m.step(t0);
  REQUIRE(m.on_committed("a", {1, kDigest2, true}).ok());
  (void)m.step(t0);
  m.on_applied({});
  auto end = m.step(t0);
  CHECK(kinds(end) == std::vector<std::string>{"drop 640", "release 2 stop", "end finished with checkpoint"});
  CHECK(recorded<history::Dropped>(end).round == 1);
  CHECK(recorded<history::Dropped>(end).reason == "the job finished after round 1 before this work could join a round");
}

TEST_CASE("state that arrives while the trainer trains from the held anchor keeps that anchor as its base") {
  auto m = joined(0);                                       // trainer welcomed at round 1, training
  REQUIRE(m.on_committed("a", {2, kDigest3, false}).ok());  // missed rounds 1 and 2
  (void)m.step(t0);
  m.on_state_offer("a", offer(2, kDigest3), t0);
  m.on_state_arrived({2, kDigest3});
  auto in = m.step(t0);
  CHECK(kinds(in) == std::vector<std::string>{"receive from a", "keep anchor", "install", "move trainer 3"});
  CHECK(first<KeepTrainerAnchor>(in).replaced);
  CHECK(m.trainer_round() == 1);  // the wiring could not move it (it trains): on from the kept anchor
  m.on_phase({1, 0, 640, 1.0});
  auto ready = m.step(t0 + 1s);
  CHECK((sent<ReadyMessage>(ready).round == 3 && sent<ReadyMessage>(ready).anchor_round == 1));
}

TEST_CASE("the trainer ahead of the held state, or named without a finished phase, is caught and said") {
  SECTION("a phase of a later round than the next") {
    auto m = joined(0);
    m.on_phase({3, 0, 640, 1.0});
    auto a = m.step(t0);
    CHECK(kinds(a) == std::vector<std::string>{"send state_request to a"});
    CHECK(noted(a, "the trainer finished round 3 while this site holds round 0"));
  }
  SECTION("a participant without a phase reports it, so the round is planned again without waiting") {
    auto m = joined(0);
    REQUIRE(m.on_plan("a", plan(1, {"a", "b"}, {}, 2)).ok());
    auto a = m.step(t0);
    CHECK(kinds(a) == std::vector<std::string>{"send failed to a", "decline 1.2"});
    CHECK((sent<FailedMessage>(a).round == 1 && sent<FailedMessage>(a).attempt == 2));
    CHECK(sent<FailedMessage>(a).reason == "b has no finished phase for round 1");
    CHECK(m.where() == Where::idle);
  }
  SECTION("a plan that counts other work than the finished phase (a READY from before a restart) is reported") {
    auto m = joined(2);
    m.on_phase({3, 0, 640, 1.0});
    (void)m.step(t0);
    // The READY the coordinator heard said 1280 tokens trained for round 2.
    REQUIRE(m.on_plan("a", counting(plan(3, {"a", "b"}, {}, 1), "b", 1280, 2)).ok());
    auto a = m.step(t0);
    CHECK(kinds(a) == std::vector<std::string>{"send failed to a", "decline 3.1", "send ready to a"});
    CHECK(sent<FailedMessage>(a).reason ==
          "the plan of round 3 counts 1280 tokens of b trained for round 2; its finished phase has 640 tokens "
          "trained for round 3");
    CHECK((sent<ReadyMessage>(a).round == 3 && sent<ReadyMessage>(a).anchor_round == 3 &&
           sent<ReadyMessage>(a).tokens == 640));
    CHECK(m.where() == Where::idle);
    // The plan of the phase it has runs.
    REQUIRE(m.on_plan("a", plan(3, {"a", "b"}, {}, 2)).ok());
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"exchange"});
  }
}

TEST_CASE("a failed exchange is reported with its attempt, and READY goes out again") {
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b"}, {}, 3)).ok());
  (void)m.step(t0);
  m.on_exchange_done(1, 3, Status(Err::io, "peer a: not connected"));
  auto a = m.step(t0 + 100ms);  // READY again at once, not at the next resend
  CHECK(kinds(a) == std::vector<std::string>{"send failed to a", "send ready to a"});
  CHECK(sent<FailedMessage>(a).attempt == 3);
  CHECK(sent<FailedMessage>(a).reason == "peer a: not connected");
  CHECK(noted(a, "the exchange of round 1 failed: peer a: not connected"));
  SECTION("an observer's failure is not reported (it owes the round nothing)") {
    auto o = joined(0);
    REQUIRE(o.on_plan("a", plan(1, {"a", "c"}, {"b"})).ok());
    (void)o.step(t0);
    o.on_exchange_done(1, 0, Status(Err::io, "peer a: reset"));
    CHECK(kinds(o.step(t0)).empty());
  }
}

TEST_CASE("the last round: applied, the trainer told to stop, the job finished; then the final state is handed out") {
  auto m = joined(0);
  to_committing(m, 1, kDigest2);
  REQUIRE(m.on_committed("a", {1, kDigest2, true}).ok());
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"apply"});
  m.on_applied({});
  auto end = m.step(t0);
  CHECK(kinds(end) == std::vector<std::string>{"release 2 stop", "end finished with checkpoint"});
  CHECK(noted(end, "job finished after round 1"));
  CHECK(m.where() == Where::finished);
  // Nothing moves it any more; a site that comes back late gets the final state and COMMITTED.
  m.on_phase({2, 0, 1, 1});
  CHECK(m.on_plan("a", plan(2, {"a", "b"})).ok());
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"decline 2.0"});
  m.on_state_request("c");
  auto late = m.step(t0);
  CHECK(kinds(late) == std::vector<std::string>{"offer to c", "send committed to c"});
  CHECK((sent<CommittedMessage>(late).round == 1 && sent<CommittedMessage>(late).final));
}

TEST_CASE("a state asked for while the step is applied is offered once it is, the round it gave") {
  auto m = joined(0);
  to_committing(m, 1, kDigest2);
  REQUIRE(m.on_committed("a", {1, kDigest2, false}).ok());
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"apply"});
  m.on_state_request("c");
  m.on_state_request("d", StateRequestMessage{"j", 0, kDigest1, 0});
  CHECK(kinds(m.step(t0)).empty());  // nothing reads the state while it is stepped
  m.on_applied({});
  auto after = m.step(t0);
  const auto k = kinds(after);
  REQUIRE(k.size() >= 2);
  CHECK(std::vector<std::string>(k.end() - 2, k.end()) == std::vector<std::string>{"offer to c", "offer to d"});
  CHECK(m.held()->round == 1);
  // The last round: the asker gets the final state and COMMITTED.
  auto f = joined(0);
  to_committing(f, 1, kDigest2);
  REQUIRE(f.on_committed("a", {1, kDigest2, true}).ok());
  (void)f.step(t0);
  f.on_state_request("c");
  f.on_applied({});
  const auto last = kinds(f.step(t0));
  CHECK(std::vector<std::string>(last.end() - 2, last.end()) ==
        std::vector<std::string>{"offer to c", "send committed to c"});
}

TEST_CASE("a final COMMITTED heard while catching up ends the job once the state of that round is in") {
  ParticipantMachine m(options(), std::nullopt, std::nullopt, 0, t0);
  (void)m.step(t0);
  REQUIRE(m.on_committed("a", {6, kDigest2, true}).ok());
  m.on_state_offer("a", offer(6, kDigest2), t0);
  m.on_state_arrived({6, kDigest2});
  CHECK(kinds(m.step(t0)) ==
        std::vector<std::string>{"receive from a", "install", "welcome 7", "end finished with checkpoint"});
  CHECK(m.where() == Where::finished);
}

TEST_CASE("PLAN, COMMITTED and ABORT from a site other than the coordinator are refused and change nothing") {
  auto m = joined(0);
  CHECK(m.on_plan("c", plan(1, {"b", "c"})).message() == "PLAN of round 1 from c, which is not the coordinator (a)");
  CHECK(m.on_committed("c", {1, kDigest2, false}).code() == Err::invalid_argument);
  CHECK(m.on_abort("c", {1, 0, "x"}).code() == Err::invalid_argument);
  CHECK(kinds(m.step(t0)).empty());
  CHECK(m.where() == Where::idle);
}

TEST_CASE("a COMMITTED heard while an observer's exchange then fails: the site catches up, it does not sit behind") {
  auto m = joined(0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "c"}, {"b"})).ok());
  (void)m.step(t0);
  REQUIRE(m.on_committed("a", {1, kDigest2, true}).ok());  // the job's last round
  m.on_exchange_done(1, 0, Status(Err::io, "peer c: reset"));
  auto a = m.step(t0);
  CHECK(kinds(a) == std::vector<std::string>{"send state_request to a"});
  CHECK(noted(a, "round 1 is committed and this site holds round 0"));
  m.on_state_offer("a", offer(1, kDigest2), t0);
  m.on_state_arrived({1, kDigest2});
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"receive from a", "keep anchor", "install", "move trainer 2",
                                                      "end finished with checkpoint"});
}

TEST_CASE("the round's averaged delta is freed when the round is over: applied, aborted, or unwound") {
  auto m = joined(0);
  to_committing(m, 1, kDigest2);
  REQUIRE(m.on_abort("a", {1, 0, "anchor digests differ"}).ok());
  CHECK(forgets(m.step(t0)) == 1);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b"}, {}, 1)).ok());
  (void)m.step(t0);
  REQUIRE(m.on_abort("a", {1, 1, "peer a: reset"}).ok());
  CHECK(forgets(m.step(t0)) == 0);  // the all-reduce still writes it
  m.on_exchange_done(1, 1, kDigest2);
  CHECK(forgets(m.step(t0)) == 1);
  auto n = joined(0);
  to_committing(n, 1, kDigest2);
  REQUIRE(n.on_committed("a", {1, kDigest2, false}).ok());
  (void)n.step(t0);
  n.on_applied({});
  CHECK(forgets(n.step(t0)) == 1);
}

TEST_CASE("an ABORT while an exchange unwinds toward catching up keeps the catching up") {
  auto m = joined(0);
  m.on_phase({1, 0, 640, 1.5});
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(1, {"a", "b"})).ok());
  (void)m.step(t0);
  REQUIRE(m.on_committed("a", {3, kDigest3, false}).ok());  // two rounds ahead: catch up once the exchange ends
  REQUIRE(m.on_abort("a", {1, 0, "late"}).ok());
  m.on_exchange_done(1, 0, Status(Err::io, "cancelled"));
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"cancel 1.0", "aborted 1.0", "send state_request to a",
                                                      "send round_query to a", "send round_query to b",
                                                      "send round_query to c"});
  CHECK(m.where() == Where::catching_up);
}

TEST_CASE("a COMMIT whose record the journal refuses is not sent, and both are tried again at the next resend") {
  auto m = joined(2);
  m.on_phase({3, 0, 0, 1.0});
  (void)m.step(t0 + 1s);
  REQUIRE(m.on_plan("a", counting(plan(3, {"a", "b", "c"}), "b", 1, 3)).ok());
  (void)m.step(t0 + 1400ms);
  m.on_exchange_done(3, 0, kDigest2);
  CHECK(kinds(m.step(t0 + 2s)) == std::vector<std::string>{"journal and send commit to a"});
  m.on_commit_unjournaled();                  // a full disk: the wiring sent nothing
  CHECK(kinds(m.step(t0 + 2100ms)).empty());  // not at once: every resend interval
  CHECK(m.where() == Where::committing);
  CHECK(m.pending_commit().has_value());
  CHECK(kinds(m.step(t0 + 2300ms)) == std::vector<std::string>{"journal and send commit to a"});
  // Written this time: later resends need no record.
  CHECK(kinds(m.step(t0 + 2600ms)) == std::vector<std::string>{"send commit to a"});
  // A new attempt of the round is a new vote: journaled again.
  REQUIRE(m.on_abort("a", AbortMessage{3, 0, "a site failed"}).ok());
  (void)m.step(t0 + 2700ms);
  REQUIRE(m.on_plan("a", counting(plan(3, {"a", "b", "c"}, {}, 1), "b", 1, 3)).ok());
  (void)m.step(t0 + 2800ms);
  m.on_exchange_done(3, 1, kDigest3);
  auto again = m.step(t0 + 2900ms);
  CHECK(kinds(again) == std::vector<std::string>{"journal and send commit to a"});
  CHECK(first<JournalCommit>(again).pending.attempt == 1);
}

TEST_CASE("the coordinator's messages that come while the step is applied are taken once it ends, in order") {
  auto m = joined(0);
  to_committing(m, 1, kDigest2);
  REQUIRE(m.on_committed("a", {1, kDigest2, false}).ok());
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"apply"});
  // Refused at once: only the office holder's messages are held.
  CHECK(m.on_plan("c", plan(2, {"a", "c"}, {"b"})).code() == Err::invalid_argument);
  SECTION("the next round's PLAN: observed once the step ends, not declined") {
    REQUIRE(m.on_plan("a", plan(2, {"a", "c"}, {"b"})).ok());
    CHECK(kinds(m.step(t0)).empty());
    CHECK(m.where() == Where::applying);
    m.on_applied({});
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"release 2", "observe"});
    CHECK(m.where() == Where::exchanging);
    CHECK(m.held()->round == 1);
  }
  SECTION("that PLAN and its ABORT: exchanged, then given up") {
    REQUIRE(m.on_plan("a", plan(2, {"a", "c"}, {"b"})).ok());
    REQUIRE(m.on_abort("a", {2, 0, "peer c: reset"}).ok());
    CHECK(kinds(m.step(t0)).empty());
    m.on_applied({});
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"release 2", "observe", "aborted 2.0", "cancel 2.0"});
    CHECK(m.where() == Where::unwinding);
  }
  SECTION("a round committed without this site meanwhile: caught up after the step") {
    REQUIRE(m.on_committed("a", {2, kDigest3, false}).ok());
    CHECK(kinds(m.step(t0)).empty());
    m.on_applied({});
    auto after = m.step(t0);
    CHECK(noted(after, "round 2 was committed without this site"));
    CHECK(m.where() == Where::catching_up);
    CHECK(m.held()->round == 1);
  }
  SECTION("the office changed hands meanwhile (even back to the same site): what was held is void") {
    REQUIRE(m.on_plan("a", plan(2, {"a", "c"}, {"b"})).ok());
    m.on_office("");
    m.on_office("a");
    m.on_applied({});
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"release 2"});
    CHECK(m.where() == Where::idle);
  }
  SECTION("a step that failed: the job ends, and nothing held is taken") {
    REQUIRE(m.on_plan("a", plan(2, {"a", "c"}, {"b"})).ok());
    m.on_applied(Status(Err::mismatch, "the anchor came out otherwise"));
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"end failed"});
    CHECK(m.where() == Where::ended);
  }
}
