// STATE_SYNC between sites with a fixed clock: what a holder offers, how a
// transfer from one holder or several goes on, stalls, breaks or is taken
// over, and which offers a catching-up site takes on the state it holds,
// each checked by the actions the participant machine orders (in order).
#include "daemon/tests/participant_fixture.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::daemon::participant_test;

TEST_CASE("STATE_SYNC: a site answers a request with its state, or says why it has none") {
  auto idle = joined(3);
  idle.on_state_request("c");
  CHECK(kinds(idle.step(t0)) == std::vector<std::string>{"offer to c"});
  ParticipantMachine behind(options(), HeldState{1, kDigest1}, std::nullopt, 0, t0);
  (void)behind.step(t0);
  behind.on_state_request("c");
  CHECK(kinds(behind.step(t0)) == std::vector<std::string>{"offer to c: this site is catching up itself"});
  ParticipantMachine fresh(options(), std::nullopt, std::nullopt, 0, t0);
  (void)fresh.step(t0);
  fresh.on_state_request("c");
  CHECK(kinds(fresh.step(t0)) == std::vector<std::string>{"offer to c: no committed state yet"});
}

TEST_CASE("STATE_SYNC: a site that had no state to give offers it to the askers as soon as it holds it") {
  ParticipantMachine m(options("a"), std::nullopt, HeldState{0, ""}, 0, t0);
  (void)m.step(t0);
  m.on_state_request("b");
  m.on_state_request("c");
  CHECK(kinds(m.step(t0)) ==
        std::vector<std::string>{"offer to b: no committed state yet", "offer to c: no committed state yet"});
  m.on_initial_parameters({0, kDigest1});
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"publish initial", "offer to b", "offer to c"});
  m.on_state_request("c");  // asked again (its poll): offered again, once
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"offer to c"});
}

TEST_CASE("STATE_SYNC: an offer names the state and the last listed round the asker said it has, also once it waited") {
  // A site killed after its journal learned round 3, before it listed it:
  // it rebuilt round 3 from its disk and lists rounds through 2 only.
  StateRequestMessage request{"job", 3, kDigest1};
  request.listed_round = 2;
  auto offered = [](const ParticipantMachine::Actions& a) {
    REQUIRE(a.actions.size() == 1);
    const auto* o = std::get_if<OfferState>(&a.actions[0]);
    REQUIRE(o != nullptr);
    return *o;
  };
  auto idle = joined(3);
  idle.on_state_request("c", request);
  auto now = offered(idle.step(t0));
  CHECK(now.reason.empty());
  REQUIRE(now.asker);
  CHECK((now.asker->round == 3 && now.asker->digest == kDigest1));
  CHECK(now.listed_round == std::optional<std::uint64_t>(2));

  ParticipantMachine m(options("a"), std::nullopt, HeldState{3, kDigest1}, 0, t0);
  (void)m.step(t0);
  m.on_state_request("c", request);
  CHECK(offered(m.step(t0)).reason == "no committed state yet");
  m.on_state_offer("b", offer(3, kDigest1), t0);
  m.on_state_arrived({3, kDigest1});
  auto later = m.step(t0);
  REQUIRE(!later.actions.empty());
  const auto* o = std::get_if<OfferState>(&later.actions.back());
  REQUIRE(o != nullptr);
  CHECK((o->peer == "c" && o->reason.empty() && o->asker && o->asker->round == 3));
  CHECK(o->listed_round == std::optional<std::uint64_t>(2));
}

TEST_CASE("STATE_SYNC: a site catching up itself offers the state it installs to those it turned away") {
  ParticipantMachine m(options("a"), std::nullopt, HeldState{3, kDigest1}, 0, t0);
  (void)m.step(t0);
  m.on_state_request("c");
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"offer to c: no committed state yet"});
  m.on_state_offer("b", offer(3, kDigest1), t0);
  m.on_state_arrived({3, kDigest1});
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"receive from b", "install", "welcome 4", "offer to c"});
}

TEST_CASE("STATE_SYNC: another holder of the arriving state helps; a stalled or broken one gives way") {
  ParticipantMachine m(options("a"), std::nullopt, HeldState{4, kDigest1}, 0, t0);
  (void)m.step(t0);
  m.on_state_offer("b", offer(4, kDigest1), t0);
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"receive from b"});
  m.on_state_offer("b", offer(4, kDigest1), t0 + 500ms);  // the answer to an earlier request: the same transfer
  CHECK(kinds(m.step(t0 + 500ms)).empty());
  // c holds the same state: it sends a share of what is missing.
  m.on_state_offer("c", offer(4, kDigest1), t0 + 500ms);
  auto helps = m.step(t0 + 500ms);
  CHECK(kinds(helps) == std::vector<std::string>{"receive from c"});
  CHECK(noted(helps, "c helps with the state of round 4"));
  // An offer of another round while this one arrives changes nothing.
  m.on_state_offer("c", offer(5, kDigest2), t0 + 600ms);
  auto busy = m.step(t0 + 600ms);
  CHECK(kinds(busy).empty());
  CHECK(noted(busy, "c offers round 5; the state of round 4 is arriving"));
  // b goes on, c sends nothing: with two holders sharing this site's
  // downlink, each has twice the stall time; then c's share goes to b.
  for (auto at : {1000ms, 2000ms, 3000ms, 4000ms}) m.on_state_progress("b", t0 + at);
  CHECK(kinds(m.step(t0 + 4400ms)).empty());
  auto released = m.step(t0 + 4500ms);
  CHECK(kinds(released) == std::vector<std::string>{"release c"});
  CHECK(noted(released, "c sent no state frame for 4000 ms; its share goes to the others"));
  // Then b stops too: nothing from anyone for the stall time; the next
  // offer of the round goes on with the frames in (StateTransfers' resume),
  // every holder before it told to stop.
  CHECK(kinds(m.step(t0 + 5900ms)).empty());
  const auto stalled = kinds(m.step(t0 + 6000ms));
  CHECK(stalled == std::vector<std::string>{"send state_request to c"});
  m.on_state_offer("c", offer(4, kDigest1), t0 + 6100ms);
  CHECK(kinds(m.step(t0 + 6100ms)) == std::vector<std::string>{"drop b", "receive from c"});
  m.on_state_failed("mismatch: frame 3 arrived twice");
  auto broken = m.step(t0 + 6200ms);
  CHECK(noted(broken, "state transfer from c abandoned: mismatch: frame 3 arrived twice"));
  m.on_state_arrived({4, kDigest1});  // a transfer no longer in progress: nothing is installed
  CHECK(kinds(m.step(t0 + 6300ms)).empty());
  CHECK(kinds(m.step(t0 + 7100ms)) == std::vector<std::string>{"send state_request to b"});  // the next site in turn
}

TEST_CASE("STATE_SYNC: a site restarted on its checkpoint of the committed round takes no state, and trains on") {
  ParticipantMachine m(options(), HeldState{5, kDigest1}, std::nullopt, 0, t0);
  const auto asked = m.step(t0);
  CHECK(m.where() == Where::catching_up);
  CHECK(sent<StateRequestMessage>(asked).held_round == std::optional<std::uint64_t>(5));
  // The coordinator holds round 5 with the same anchor: an offer of no entries on this site's own state.
  StateOfferMessage held = offer(5, kDigest1);
  held.base_round = 5;
  held.base_digest = kDigest1;
  held.from_held = true;
  SECTION("the same anchor: idle at once, the trainer welcomed with it, nothing received or installed") {
    m.on_state_offer("a", held, t0 + 100ms);
    const auto resumed = m.step(t0 + 100ms);
    CHECK(kinds(resumed) == std::vector<std::string>{"welcome 6"});
    CHECK(noted(resumed, "a holds round 5 with the same anchor"));
    CHECK(m.where() == Where::idle);
    CHECK(m.known_committed() == 5);
    CHECK(m.held()->digest == kDigest1);
    // The next round goes on as for any current site.
    m.on_phase({6, 0, 10, 1.0});
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"send ready to a"});
    REQUIRE(m.on_plan("a", counting(plan(6, {"a", "b"}), "b", 10, 6)).ok());
    CHECK(kinds(m.step(t0 + 300ms)) == std::vector<std::string>{"exchange"});
  }
  SECTION("an offer of round 5 on another anchor, or one older than what is committed, is not taken") {
    held.base_digest = kDigest2;
    held.anchor_digest = kDigest2;
    m.on_state_offer("a", held, t0 + 100ms);
    CHECK(kinds(m.step(t0 + 100ms)).empty());
    CHECK(m.where() == Where::catching_up);
    CHECK(m.on_committed("a", {6, kDigest3, false}).ok());
    held.base_digest = kDigest1;
    held.anchor_digest = kDigest1;
    m.on_state_offer("a", held, t0 + 200ms);
    CHECK(kinds(m.step(t0 + 200ms)).empty());
    CHECK(m.where() == Where::catching_up);
  }
  SECTION("while the state of a newer round arrives, a holder a round behind saying so changes nothing") {
    m.on_state_offer("a", offer(6, kDigest2), t0 + 100ms);
    CHECK(kinds(m.step(t0 + 100ms)) == std::vector<std::string>{"receive from a"});
    m.on_state_offer("c", held, t0 + 150ms);
    const auto behind = m.step(t0 + 150ms);
    CHECK(kinds(behind).empty());
    CHECK(noted(behind, "c says this site's round 5 is the one it holds; the state of round 6 is coming"));
    CHECK(m.where() == Where::catching_up);
    m.on_state_arrived({6, kDigest2});
    CHECK(kinds(m.step(t0 + 200ms)) == std::vector<std::string>{"install", "welcome 7"});
  }
}

TEST_CASE("STATE_SYNC: a site whose journal knows a later round committed does not resume on an older state it holds") {
  // Its checkpoint holds round 5; its journal heard round 7 committed.
  ParticipantMachine m(options(), HeldState{5, kDigest1}, HeldState{7, kDigest3}, 0, t0);
  (void)m.step(t0);
  StateOfferMessage held = offer(5, kDigest1);
  held.base_round = 5;
  held.base_digest = kDigest1;
  held.from_held = true;
  m.on_state_offer("b", held, t0 + 100ms);
  const auto refused = m.step(t0 + 100ms);
  CHECK(kinds(refused).empty());
  CHECK(noted(refused, "but this site's journal has round 7 committed; asking again"));
  CHECK(m.where() == Where::catching_up);
}

TEST_CASE("STATE_SYNC: rounds offered on a state this site no longer holds are not taken") {
  ParticipantMachine m(options("a"), HeldState{4, kDigest1}, HeldState{6, kDigest2}, 0, t0);
  const auto asked = m.step(t0);
  CHECK(m.where() == Where::catching_up);
  // Its request names the round it holds.
  const auto& request = sent<StateRequestMessage>(asked);
  CHECK(request.held_round == std::optional<std::uint64_t>(4));
  CHECK(request.held_digest == kDigest1);
  StateOfferMessage rounds = offer(6, kDigest2);
  rounds.base_round = 3;  // an answer to a request made when this site held round 3
  rounds.base_digest = kDigest3;
  rounds.from_held = true;
  m.on_state_offer("b", rounds, t0);
  auto stale = m.step(t0);
  CHECK(kinds(stale).empty());
  CHECK(noted(stale, "b offers the rounds after round 3, this site holds round 4 now; asking again"));
  rounds.base_round = 4;
  rounds.base_digest = kDigest1;
  m.on_state_offer("b", rounds, t0);
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"receive from b"});
}

TEST_CASE(
    "STATE_SYNC: rounds stepped in place that give another anchor leave nothing held: the whole state is asked for") {
  ParticipantMachine m(options("a"), HeldState{4, kDigest1}, HeldState{6, kDigest2}, 0, t0);
  (void)m.step(t0);
  StateOfferMessage rounds = offer(6, kDigest2);
  rounds.base_round = 4;
  rounds.base_digest = kDigest1;
  rounds.from_held = true;
  m.on_state_offer("b", rounds, t0);
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"receive from b"});
  SECTION("the state is lost: the next request names no round held, and an offer on it is not taken") {
    m.on_state_failed("round 5 from b's round log gives anchor x, the committed one is y", true);
    (void)m.step(t0 + 100ms);
    const auto asked = m.step(t0 + 1100ms);
    const auto& request = sent<StateRequestMessage>(asked);
    CHECK_FALSE(request.held_round);
    m.on_state_offer("c", rounds, t0 + 1200ms);
    CHECK(kinds(m.step(t0 + 1200ms)).empty());
    m.on_state_offer("c", offer(6, kDigest2), t0 + 1300ms);
    CHECK(kinds(m.step(t0 + 1300ms)) == std::vector<std::string>{"receive from c"});
  }
  SECTION("a failure that left the state as it was: the next request still names it") {
    m.on_state_failed("round 5's Δ from b is damaged", false);
    (void)m.step(t0 + 100ms);
    const auto asked = m.step(t0 + 1100ms);
    CHECK(sent<StateRequestMessage>(asked).held_round == std::optional<std::uint64_t>(4));
  }
}

TEST_CASE("STATE_SYNC: a slow link is not a stopped holder: the wait follows the gaps between its frames") {
  // Before any frame: four stall times (the first frames of every
  // connection cross the link together), then the next site is asked.
  ParticipantMachine m(options("a"), std::nullopt, HeldState{4, kDigest1}, 0, t0);
  (void)m.step(t0);
  m.on_state_offer("b", offer(4, kDigest1), t0);
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"receive from b"});
  CHECK(kinds(m.step(t0 + 7900ms)).empty());
  CHECK(kinds(m.step(t0 + 8000ms)) == std::vector<std::string>{"send state_request to c"});
  // Frames 3 s apart (a 1 MB/s link, 1 MiB frames on three connections):
  // twice that gap, not the 2 s stall time, before the holder counts as stopped.
  ParticipantMachine slow(options("a"), std::nullopt, HeldState{4, kDigest1}, 0, t0);
  (void)slow.step(t0);
  slow.on_state_offer("b", offer(4, kDigest1), t0);
  (void)slow.step(t0);
  for (auto at : {1000ms, 4000ms, 7000ms}) slow.on_state_progress("b", t0 + at);
  CHECK(kinds(slow.step(t0 + 12900ms)).empty());
  CHECK(kinds(slow.step(t0 + 13000ms)) == std::vector<std::string>{"send state_request to c"});
}

TEST_CASE("STATE_SYNC: a large state is asked of every other site, each holder sending a share") {
  ParticipantOptions o = options("d");
  o.sites = {"a", "b", "c", "d"};
  ParticipantMachine m(o, std::nullopt, std::nullopt, 0, t0);
  CHECK(kinds(m.step(t0)) == std::vector<std::string>{"send join to a", "send state_request to a"});
  StateOfferMessage none;
  none.reason = "this site is catching up itself";
  m.on_state_offer("c", none, t0 + 10ms);
  // Eight frames (4 Mi values a tensor): b is asked too, c said it has none.
  StateOfferMessage large{"j", 4, kDigest1, 4u << 20, 1u << 20, "", {}};
  m.on_state_offer("a", large, t0 + 20ms);
  // a is asked for its half only, until b offers (a's frames would fill its
  // links' buffers at once, where b could take none of them over).
  CHECK(kinds(m.step(t0 + 20ms)) == std::vector<std::string>{"receive from a (1/2)", "send state_request to b"});
  m.on_state_offer("b", large, t0 + 40ms);
  CHECK(kinds(m.step(t0 + 40ms)) == std::vector<std::string>{"receive from b"});
  // b's share is all in; a's frames go on arriving, then a falls silent
  // while an earlier frame of a helper (let go long ago) still arrives.
  m.on_state_progress("b", t0 + 100ms);
  m.on_state_share_done("b");
  for (auto at : {1000ms, 2000ms}) m.on_state_progress("a", t0 + at);
  m.on_state_progress("x", t0 + 4500ms);  // not a holder of it now: counts as the transfer's progress only
  // b, silent but done, is not released; a, silent with frames to send for
  // twice the stall time (two holders), is.
  CHECK(kinds(m.step(t0 + 5900ms)).empty());
  auto released = m.step(t0 + 6000ms);
  CHECK(kinds(released) == std::vector<std::string>{"release a"});
  CHECK(noted(released, "a sent no state frame for 4000 ms; its share goes to the others"));
  // b now has a's share, and the stall time anew for it.
  CHECK(kinds(m.step(t0 + 7900ms)).empty());
  m.on_state_progress("b", t0 + 7900ms);
  m.on_state_arrived({4, kDigest1});
  CHECK(kinds(m.step(t0 + 7900ms)) == std::vector<std::string>{"install", "welcome 5"});

  SECTION("nothing from anyone for the stall time: a holder that owes frames is let go at once, to the ones done") {
    ParticipantMachine q(o, std::nullopt, std::nullopt, 0, t0);
    (void)q.step(t0);
    q.on_state_offer("a", large, t0 + 20ms);
    q.on_state_offer("b", large, t0 + 40ms);
    (void)q.step(t0 + 40ms);
    q.on_state_progress("b", t0 + 100ms);
    q.on_state_share_done("b");
    q.on_state_progress("a", t0 + 1s);
    CHECK(kinds(q.step(t0 + 2900ms)).empty());
    CHECK(kinds(q.step(t0 + 3000ms)) == std::vector<std::string>{"release a"});  // not a new request: b takes it
    CHECK(kinds(q.step(t0 + 4900ms)).empty());  // b has the stall time anew for a's frames

    SECTION("with three holders, the one that takes the frames is not let go in the same step") {
      ParticipantOptions o3 = o;
      o3.sites = {"a", "b", "c", "d"};
      ParticipantMachine r(o3, std::nullopt, std::nullopt, 0, t0);
      (void)r.step(t0);
      r.on_state_offer("a", large, t0 + 20ms);
      r.on_state_offer("b", large, t0 + 30ms);
      r.on_state_offer("c", large, t0 + 40ms);
      (void)r.step(t0 + 40ms);
      r.on_state_progress("b", t0 + 100ms);
      r.on_state_share_done("b");
      r.on_state_progress("c", t0 + 200ms);
      r.on_state_share_done("c");
      r.on_state_progress("a", t0 + 1s);
      CHECK(kinds(r.step(t0 + 3000ms)) == std::vector<std::string>{"release a"});
      CHECK(kinds(r.step(t0 + 3100ms)).empty());
    }
  }
  // A small state is not worth the others' trouble: asked of one holder only (the test above).
}
