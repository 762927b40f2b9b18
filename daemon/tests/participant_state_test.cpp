// The site's state with a fixed clock: joining and resuming, catching up,
// which anchor the trainer is welcomed with, and a stop in every state,
// each checked by the actions the participant machine orders (in order) and
// what they carry. STATE_SYNC between sites: participant_state_sync_test.cpp.
#include <yaml-cpp/yaml.h>

#include "daemon/tests/participant_fixture.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::daemon::participant_test;

TEST_CASE("a new job's coordinator takes its trainer's initialization, then trains; JOIN goes first") {
  ParticipantMachine m(options("a"), std::nullopt, HeldState{0, ""}, 0, t0);
  CHECK(m.where() == Where::awaiting_initial);
  auto a = m.step(t0);
  CHECK(kinds(a) == std::vector<std::string>{"send join to a"});
  CHECK(sent<JoinMessage>(a).last_committed_round == 0);
  CHECK(noted(a, "waiting for the trainer's initial parameters"));
  m.on_initial_parameters({0, kDigest1});
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"publish initial"});
  CHECK(m.where() == Where::idle);
  CHECK(m.trainer_round() == 1);
  CHECK(m.heartbeat_phase() == "inner");
}

TEST_CASE("a joining site asks the coordinator, retries on silence, and welcomes its trainer with the state") {
  ParticipantMachine m(options(), std::nullopt, std::nullopt, 0, t0);
  CHECK(m.where() == Where::catching_up);
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"send join to a", "send state_request to a"});
  CHECK(kinds(m.step(t0 + 900ms)).empty());
  auto again = m.step(t0 + 1s);
  CHECK(kinds(again) == std::vector<std::string>{"send state_request to a"});
  REQUIRE(again.wake_at);
  CHECK(*again.wake_at == t0 + 2s);

  // An answer without state changes nothing; a stale one neither.
  StateOfferMessage none;
  none.reason = "no committed state yet";
  m.on_state_offer("a", none, t0 + 1100ms);
  auto quiet = m.step(t0 + 1100ms);
  CHECK(kinds(quiet).empty());
  CHECK(noted(quiet, "a has no state to give yet: no committed state yet"));

  m.on_state_offer("a", offer(4, kDigest1), t0 + 1200ms);
  CHECK(kinds(m.step(t0 + 1200ms)) == std::vector<std::string>{"receive from a"});
  // While frames arrive nobody is asked again, however long it takes.
  m.on_state_progress("a", t0 + 3s);
  CHECK(kinds(m.step(t0 + 4s)).empty());
  CHECK(m.heartbeat_phase() == "catching_up");
  m.on_state_arrived({4, kDigest1});
  auto in = m.step(t0 + 4s);
  // A trainer that had no anchor yet starts from this one: no older anchor to keep.
  CHECK(kinds(in) == std::vector<std::string>{"install", "welcome 5"});
  CHECK(m.where() == Where::idle);
  CHECK(m.held()->round == 4);
}

TEST_CASE("a restarted site's trainer is welcomed only with the state it catches up to, never its checkpoint's") {
  // Its checkpoint holds round 3; the job is at round 9. The trainer says
  // HELLO before STATE_SYNC arrives: it is not welcomed with round 3's anchor.
  ParticipantMachine m(options(), HeldState{3, kDigest1}, std::nullopt, 0, t0);
  auto start = m.step(t0);
  CHECK(kinds(start) == std::vector<std::string>{"send join to a", "send state_request to a"});
  CHECK(sent<JoinMessage>(start).last_committed_round == 3);
  CHECK(m.where() == Where::catching_up);
  CHECK(m.trainer_round() == 0);
  // A PLAN, COMMITTED or ABORT meanwhile changes nothing but what is known;
  // a plan that names it is declined, so its frames never hold a connection up.
  CHECK(m.on_plan("a", plan(10, {"a", "c"})).ok());
  CHECK(m.on_plan("a", plan(10, {"a", "c"}, {"b"}, 1)).ok());
  CHECK(m.on_committed("a", {9, kDigest2, false}).ok());
  CHECK(m.known_committed() == 9);
  CHECK(kinds(m.step(t0 + 50ms)) == std::vector<std::string>{"decline 10.1"});
  // An offer older than what is committed is not taken.
  m.on_state_offer("a", offer(8, kDigest3), t0 + 100ms);
  CHECK(kinds(m.step(t0 + 100ms)).empty());
  m.on_state_offer("a", offer(9, kDigest2), t0 + 200ms);
  CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"receive from a"});
  m.on_state_arrived({9, kDigest2});
  CHECK(kinds(m.step(t0 + 300ms)) == std::vector<std::string>{"install", "welcome 10"});
  CHECK(m.trainer_round() == 10);
}

TEST_CASE("a coordinator resumes from its checkpoint only when it holds the journal's committed round and digest") {
  SECTION("matching: the trainer is welcomed with it") {
    ParticipantMachine m(options("a"), HeldState{5, kDigest1}, HeldState{5, kDigest1}, 0, t0);
    auto a = m.step(t0);
    CHECK(kinds(a) == std::vector<std::string>{"send join to a", "welcome 6"});
    CHECK(noted(a, "resumed from the checkpoint of round 5"));
    CHECK(m.where() == Where::idle);
  }
  SECTION("behind the journal: the state comes from the other sites, in turn") {
    ParticipantMachine m(options("a"), HeldState{4, kDigest1}, HeldState{5, kDigest2}, 0, t0);
    auto a = m.step(t0);
    CHECK(kinds(a) == std::vector<std::string>{"send join to a", "send state_request to b"});
    CHECK(noted(a, "the checkpoint holds round 4, the journal's last committed round is 5"));
    CHECK(kinds(m.step(t0 + 1s)) == std::vector<std::string>{"send state_request to c"});
    CHECK(kinds(m.step(t0 + 2s)) == std::vector<std::string>{"send state_request to b"});
  }
  SECTION("the right round with another anchor (an edited round field): not loaded") {
    ParticipantMachine m(options("a"), HeldState{5, kDigest3}, HeldState{5, kDigest2}, 0, t0);
    auto a = m.step(t0);
    CHECK(m.where() == Where::catching_up);
    CHECK(noted(a, "the checkpoint's anchor of round 5 is 3333333333333333, the journal committed 2222222222222222"));
  }
  SECTION("no usable checkpoint (a damaged one is set aside) after commits: caught up, never stuck") {
    ParticipantMachine m(options("a"), std::nullopt, HeldState{5, kDigest2}, 0, t0);
    auto a = m.step(t0);
    CHECK(m.where() == Where::catching_up);
    CHECK(kinds(a) == std::vector<std::string>{"send join to a", "send state_request to b"});
    CHECK(noted(a, "the journal's last committed round is 5 and no usable checkpoint is here"));
    m.on_state_offer("b", offer(5, kDigest2), t0);
    m.on_state_arrived({5, kDigest2});
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"receive from b", "install", "welcome 6"});
  }
}

TEST_CASE("a stop in every state ends the job, saving only committed, current state") {
  auto stop = [](ParticipantMachine& m) {
    m.on_stop(JobEnd::stopped, "geolocod stopped");
    auto a = m.step(t0 + 10s);
    CHECK(m.where() == Where::ended);
    // Nothing changes it afterwards.
    m.on_phase({9, 0, 1, 1});
    CHECK(m.on_committed("a", {9, kDigest3, true}).ok());
    m.on_stop(JobEnd::cancelled, "again");
    CHECK(kinds(m.step(t0 + 11s)).empty());
    return kinds(a);
  };
  const std::vector<std::string> saved{"end stopped with checkpoint"}, unsaved{"end stopped"};
  SECTION("awaiting the initial parameters") {
    ParticipantMachine m(options("a"), std::nullopt, HeldState{0, ""}, 0, t0);
    (void)m.step(t0);
    CHECK(stop(m) == unsaved);
  }
  SECTION("catching up (a stale checkpoint is not saved over the one on disk)") {
    ParticipantMachine m(options(), HeldState{1, kDigest1}, std::nullopt, 0, t0);
    (void)m.step(t0);
    CHECK(stop(m) == unsaved);
  }
  SECTION("idle") {
    auto m = joined(2);
    CHECK(stop(m) == saved);
  }
  SECTION("exchanging, and its end afterwards changes nothing") {
    auto m = joined(0);
    m.on_phase({1, 0, 640, 1.5});
    (void)m.step(t0);
    REQUIRE(m.on_plan("a", plan(1, {"a", "b"})).ok());
    (void)m.step(t0);
    CHECK(stop(m) == saved);
    m.on_exchange_done(1, 0, kDigest2);
    CHECK(kinds(m.step(t0 + 12s)).empty());
  }
  SECTION("committing") {
    auto m = joined(0);
    to_committing(m, 1, kDigest2);
    CHECK(stop(m) == saved);
    CHECK(m.held()->round == 0);  // round 1 was not applied
  }
  SECTION("applying: the end waits for the step, and saves the round it gave") {
    auto m = joined(0);
    to_committing(m, 1, kDigest2);
    REQUIRE(m.on_committed("a", {1, kDigest2, false}).ok());
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"apply"});
    m.on_stop(JobEnd::stopped, "geolocod stopped");
    CHECK(kinds(m.step(t0)).empty());  // no checkpoint of a state being stepped
    CHECK(m.where() == Where::applying);
    m.on_applied({});
    CHECK(kinds(m.step(t0)) == saved);
    CHECK(m.where() == Where::ended);
    CHECK(m.held()->round == 1);
  }
  SECTION("applying: a step that fails ends the job without a checkpoint, whatever end was asked") {
    auto m = joined(0);
    to_committing(m, 1, kDigest2);
    REQUIRE(m.on_committed("a", {1, kDigest2, false}).ok());
    (void)m.step(t0);
    m.on_trainer_failed("gave up");
    CHECK(kinds(m.step(t0)).empty());
    m.on_applied(Status(Err::mismatch, "torn"));
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"end failed"});
  }
  SECTION("unwinding") {
    auto m = joined(0);
    m.on_phase({1, 0, 640, 1.5});
    (void)m.step(t0);
    REQUIRE(m.on_plan("a", plan(1, {"a", "b"})).ok());
    REQUIRE(m.on_abort("a", {1, 0, "x"}).ok());
    (void)m.step(t0);
    CHECK(stop(m) == saved);
  }
  SECTION("a failed trainer ends the job as failed") {
    auto m = joined(0);
    m.on_trainer_failed("gave up after 5 restarts");
    auto a = m.step(t0);
    CHECK(kinds(a) == std::vector<std::string>{"end failed with checkpoint"});
    CHECK(first<EndJob>(a).reason == "the trainer failed: gave up after 5 restarts");
  }
  SECTION("an internal failure to apply a round ends it without saving the broken state") {
    auto m = joined(0);
    to_committing(m, 1, kDigest2);
    REQUIRE(m.on_committed("a", {1, kDigest2, false}).ok());
    (void)m.step(t0);
    m.on_applied(Status(Err::mismatch, "after round 1 this site's anchor is 3333333333333333"));
    CHECK(kinds(m.step(t0)) == std::vector<std::string>{"end failed"});
  }
}

TEST_CASE("a state older than what is committed by the time it is in: caught up again") {
  ParticipantMachine m(options(), std::nullopt, std::nullopt, 0, t0);
  (void)m.step(t0);
  m.on_state_offer("a", offer(3, kDigest1), t0);
  REQUIRE(m.on_committed("a", {4, kDigest2, false}).ok());  // round 4 commits while round 3's state arrives
  m.on_state_arrived({3, kDigest1});
  auto a = m.step(t0 + 10ms);
  CHECK(kinds(a) == std::vector<std::string>{"receive from a", "install", "welcome 4", "send state_request to a"});
  CHECK(m.where() == Where::catching_up);
}

TEST_CASE("named a participant while catching up (a READY from before a restart): reported at once") {
  ParticipantMachine m(options(), HeldState{2, kDigest1}, std::nullopt, 0, t0);
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(5, {"a", "b"}, {}, 1)).ok());
  auto a = m.step(t0);
  CHECK(kinds(a) == std::vector<std::string>{"send failed to a", "decline 5.1"});
  CHECK((sent<FailedMessage>(a).round == 5 && sent<FailedMessage>(a).attempt == 1));
  CHECK(sent<FailedMessage>(a).reason == "b is catching up");
}

TEST_CASE("a coordinator that lost its state: with no other site the job fails saying why; else it says who has none") {
  auto one = options("a");
  one.sites = {"a"};
  ParticipantMachine alone(one, std::nullopt, HeldState{6, kDigest2}, 0, t0);
  auto a = alone.step(t0);
  CHECK(kinds(a) == std::vector<std::string>{"send join to a", "end failed"});
  CHECK_THAT(first<EndJob>(a).reason,
             Catch::Contains("no usable state of round 6") && Catch::Contains("no other site to take it from"));
  CHECK(alone.where() == Where::ended);

  ParticipantMachine m(options("a"), std::nullopt, HeldState{6, kDigest2}, 0, t0);
  (void)m.step(t0);
  StateOfferMessage none;
  none.reason = "this site is catching up itself";
  m.on_state_offer("b", none, t0);
  m.on_state_offer("c", none, t0);
  auto told = m.step(t0 + 1s);
  CHECK(noted(told, "no site can give the state of round 6 now: every other site is catching up or holds none"));
  CHECK_FALSE(noted(m.step(t0 + 2s), "no site can give"));  // said once
}

TEST_CASE("a trainer not yet training when a newer state arrives may start from it, else it keeps the older anchor") {
  auto m = joined(0);  // trainer welcomed at round 1, but it may not have attached yet
  REQUIRE(m.on_committed("a", {2, kDigest3, false}).ok());
  (void)m.step(t0);
  m.on_state_offer("a", offer(2, kDigest3), t0);
  m.on_state_arrived({2, kDigest3});
  auto in = m.step(t0);
  CHECK(kinds(in) == std::vector<std::string>{"receive from a", "keep anchor", "install", "move trainer 3"});
  SECTION("it had not started: it starts from round 3's anchor, on time") {
    m.on_trainer_moved(3);
    CHECK(m.trainer_round() == 3);
    m.on_phase({3, 0, 640, 1.0});
    auto ready = m.step(t0 + 1s);
    CHECK((sent<ReadyMessage>(ready).round == 3 && sent<ReadyMessage>(ready).anchor_round == 3));
  }
  SECTION("it had started: its work is late, from the kept anchor") {
    CHECK(m.trainer_round() == 1);
    m.on_phase({1, 0, 640, 1.0});
    auto ready = m.step(t0 + 1s);
    CHECK((sent<ReadyMessage>(ready).round == 3 && sent<ReadyMessage>(ready).anchor_round == 1));
  }
}

TEST_CASE("a site's machine takes its options from the job file") {
  auto spec = job::parse_job_yaml(
      YAML::Load("name: opts\nsites: [x, y, z]\ncoordinator: y\ntrainer: {kind: builtin, model: mlp}\n"
                 "inner: {steps: 40}\nstreaming: {fragments: 2}\n"
                 "straggler: {deadline: 5s, min_sites: 2, policy: drop}\nstop: {rounds: 4}\n"),
      "opts.yaml");
  REQUIRE(spec.ok());
  const ParticipantOptions o = participant_options(*spec, "z", Millis(250));
  CHECK(o.job == "opts");
  CHECK(o.self == "z");
  CHECK(o.coordinator == "y");
  CHECK(o.sites == std::vector<std::string>{"x", "y", "z"});
  CHECK(o.fragments == 2);
  CHECK(o.straggler.policy == diloco::StragglerPolicy::drop);
  CHECK(o.inner_steps == 40);
  CHECK(o.ready_resend_ms == Millis(250));
}

TEST_CASE("the second copy of a plan declined while catching up is declined again, and its commit caught up to") {
  ParticipantMachine m(options(), std::nullopt, std::nullopt, 0, t0);
  (void)m.step(t0);
  m.on_state_offer("a", offer(119, kDigest1), t0);
  (void)m.step(t0);
  // PLAN 120 names b late (it was joining) while its state is on the way: declined, its frames dropped.
  REQUIRE(m.on_plan("a", plan(120, {"a", "c"}, {"b"}, 1)).ok());
  CHECK(kinds(m.step(t0 + 1ms)) == std::vector<std::string>{"decline 120.1"});
  m.on_state_arrived({119, kDigest1});
  (void)m.step(t0 + 2ms);
  REQUIRE(m.where() == Where::idle);
  // The queued copy of the same PLAN arrives after the install: not observed, declined again.
  REQUIRE(m.on_plan("a", plan(120, {"a", "c"}, {"b"}, 1)).ok());
  CHECK(kinds(m.step(t0 + 3ms)) == std::vector<std::string>{"decline 120.1"});
  CHECK(m.where() == Where::idle);
  // Round 120 commits without b: it catches up at once, not at the next round's plan.
  REQUIRE(m.on_committed("a", {120, kDigest2, false, 1}).ok());
  (void)m.step(t0 + 4ms);
  CHECK(m.where() == Where::catching_up);
}

TEST_CASE("restarted behind: a plan two rounds ahead, the state, the plan's copy, then its commit: caught up again") {
  ParticipantMachine m(options(), HeldState{110, kDigest1}, std::nullopt, 0, t0);
  (void)m.step(t0);
  REQUIRE(m.on_plan("a", plan(121, {"a", "c"}, {"b"}, 3)).ok());
  (void)m.step(t0 + 1ms);
  REQUIRE(m.where() == Where::catching_up);
  m.on_state_offer("a", offer(120, kDigest2), t0 + 2ms);
  (void)m.step(t0 + 2ms);
  m.on_state_arrived({120, kDigest2});
  (void)m.step(t0 + 3ms);
  REQUIRE(m.where() == Where::idle);
  REQUIRE(m.on_plan("a", plan(121, {"a", "c"}, {"b"}, 3)).ok());
  CHECK(kinds(m.step(t0 + 4ms)) == std::vector<std::string>{"decline 121.3"});
  REQUIRE(m.on_committed("a", {121, kDigest3, false, 3}).ok());
  auto a = m.step(t0 + 5ms);
  CHECK(m.where() == Where::catching_up);
  CHECK(noted(a, "catching up: round 121 was committed without this site"));
}
