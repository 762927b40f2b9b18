// What a holder sends a joining site (state_source.h): the cheapest of the
// asker's missing rounds, the checkpoint and the rounds since, and a new
// checkpoint, as a pure decision; and the transfers themselves between two
// loopback sites: a checkpoint file and round-log entries that arrive as
// the holder's live state bit for bit though the holder wrote a new
// checkpoint and cut its log mid-transfer; only the missing rounds for a
// site that holds an older one; a damaged entry or a base the asker no
// longer holds refused with what went wrong.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <fcntl.h>
#include <sys/stat.h>

#include "common/digest.h"
#include "daemon/round_deltas.h"
#include "daemon/round_replay.h"
#include "daemon/state_source.h"
#include "daemon/tests/round_fixtures.h"
#include "daemon/tests/state_pair.h"
#include "outer/checkpoint.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::daemon::testing;

TEST_CASE(
    "a holder sends the cheapest of the asker's missing rounds, its checkpoint with the rounds since, and a new "
    "checkpoint") {
  const std::uint64_t values = 1000;  // a state of 8000 bytes
  std::map<std::uint64_t, JournaledCommit> commits;
  for (std::uint64_t r = 1; r <= 6; ++r) commits[r] = JournaledCommit{cat("d", r), 0, 0, 0};
  std::map<std::uint64_t, RoundDeltaHeader> log;
  for (std::uint64_t r = 3; r <= 6; ++r) log[r] = RoundDeltaHeader{r, 0, cat("d", r), 1000, "h"};
  const RoundAt held{6, "d6"};
  const std::optional<RoundAt> checkpoint = RoundAt{2, "d2"};
  using K = SourcePlan::Kind;

  SECTION("an asker that holds a committed round the log reaches from gets only the rounds since") {
    const SourcePlan p = plan_state_source(held, RoundAt{4, "d4"}, checkpoint, commits, log, values);
    CHECK(p.kind == K::deltas_from_held);
    CHECK(p.base == 4);
    CHECK(p.rounds == std::vector<std::uint64_t>{5, 6});
    CHECK(p.bytes == 2000);
  }
  SECTION("an asker that holds the held round itself gets no entries at all; one with another anchor, the state") {
    const SourcePlan p = plan_state_source(held, RoundAt{6, "d6"}, checkpoint, commits, log, values);
    CHECK(p.kind == K::deltas_from_held);
    CHECK(p.base == 6);
    CHECK(p.rounds.empty());
    CHECK(p.bytes == 0);
    CHECK(plan_state_source(held, RoundAt{6, "other"}, checkpoint, commits, log, values).kind == K::checkpoint_now);
    CHECK(plan_state_source(held, RoundAt{7, "d7"}, checkpoint, commits, log, values).kind == K::checkpoint_now);
  }
  SECTION(
      "an asker with nothing, or with a state that is no committed round, gets the checkpoint and the rounds since") {
    for (auto& [r, h] : log) h.bytes = 500;  // 2000 in all: a quarter of the state
    for (const auto& asker : {std::optional<RoundAt>(), std::optional<RoundAt>(RoundAt{4, "not-d4"})}) {
      const SourcePlan p = plan_state_source(held, asker, checkpoint, commits, log, values);
      CHECK(p.kind == K::checkpoint_and_deltas);
      CHECK(p.base == 2);
      CHECK(p.rounds == std::vector<std::uint64_t>{3, 4, 5, 6});
      CHECK(p.bytes == 10000);
    }
    log[6].bytes = 501;  // more than a quarter: a checkpoint of round 6 is written and sent
    const SourcePlan p = plan_state_source(held, std::nullopt, checkpoint, commits, log, values);
    CHECK(p.kind == K::checkpoint_now);
    CHECK(p.base == 6);
  }
  SECTION("rounds that weigh more than the state are not sent: the state is") {
    for (auto& [r, h] : log) h.bytes = 3000;  // 12000 from the checkpoint, 6000 from round 4
    SourcePlan p = plan_state_source(held, std::nullopt, checkpoint, commits, log, values);
    CHECK(p.kind == K::checkpoint_now);
    CHECK(p.base == 6);
    CHECK(p.rounds.empty());
    CHECK(p.bytes == 8000);
    p = plan_state_source(held, RoundAt{4, "d4"}, checkpoint, commits, log, values);
    CHECK(p.kind == K::deltas_from_held);
    CHECK(p.bytes == 6000);
    log[6].bytes = 9000;
    p = plan_state_source(held, RoundAt{5, "d5"}, checkpoint, commits, log, values);
    CHECK(p.kind == K::checkpoint_now);
  }
  SECTION("a gap in the log, or an entry of another outcome, and the rounds across it are not sent") {
    log[5].digest = "other";
    CHECK(plan_state_source(held, RoundAt{4, "d4"}, checkpoint, commits, log, values).kind == K::checkpoint_now);
    log.erase(5);
    CHECK(plan_state_source(held, RoundAt{4, "d4"}, checkpoint, commits, log, values).kind == K::checkpoint_now);
    // From round 5 on the log is whole: an asker at 5 still gets only round 6.
    const SourcePlan p = plan_state_source(held, RoundAt{5, "d5"}, checkpoint, commits, log, values);
    CHECK(p.kind == K::deltas_from_held);
    CHECK(p.rounds == std::vector<std::uint64_t>{6});
  }
  SECTION("a checkpoint of the held round is sent alone; one that is no committed round is not sent") {
    SourcePlan p = plan_state_source(held, std::nullopt, RoundAt{6, "d6"}, commits, log, values);
    CHECK(p.kind == K::checkpoint_and_deltas);
    CHECK(p.base == 6);
    CHECK(p.rounds.empty());
    p = plan_state_source(held, std::nullopt, RoundAt{2, "stale"}, commits, log, values);
    CHECK(p.kind == K::checkpoint_now);
    // The job's start (round 0) has no commit to check against: its checkpoint counts.
    log[1] = RoundDeltaHeader{1, 0, "d1", 1000, "h"};
    log[2] = RoundDeltaHeader{2, 0, "d2", 1000, "h"};
    for (auto& [r, h] : log) h.bytes = 300;
    p = plan_state_source(held, std::nullopt, RoundAt{0, "start"}, commits, log, values);
    CHECK(p.kind == K::checkpoint_and_deltas);
    CHECK(p.rounds.size() == 6);
  }
}

TEST_CASE("an offer whose entries weigh more than twice the state is refused before anything is allocated") {
  StateOfferMessage o{"sync", 7, "0123456789abcdef", 1000, 1024, "", {}};  // a state of 8000 bytes
  o.base_round = 5;
  o.base_digest = "00000000deadbeef";
  o.deltas = {{6, 8000, "1111111111111111", "2222222222222222"}, {7, 8000, "1111111111111111", "0123456789abcdef"}};
  CHECK(StateReceiver::start("a", o).ok());  // 16000: twice the state
  o.deltas[1].bytes = 8001;
  auto refused = StateReceiver::start("a", o);
  CHECK(refused.status().code() == Err::invalid_argument);
  CHECK_THAT(refused.status().message(), Catch::Contains("more than twice the state"));
  o.deltas[1].bytes = std::uint64_t{1} << 40;  // what the codec lets through
  CHECK_FALSE(StateReceiver::start("a", o).ok());
}

TEST_CASE(
    "a checkpoint and the rounds since arrive as the holder's live state, though it checkpoints and cuts its log "
    "meanwhile") {
  const fs::path dir = fresh_dir("state-source");
  auto log = RoundDeltas::open(dir / "deltas", "cfg");
  REQUIRE(log.ok());
  const fs::path checkpoint_path = dir / "checkpoint.safetensors";
  const auto spec = q8_zstd();
  diloco::OuterOptimizerOptions outer;
  outer.clip_norm = 0.2;
  const std::uint64_t n = 5000;
  outer::OuterState live = initial_state(n);
  std::map<std::uint64_t, std::string> digests;
  outer::OuterState at4;
  for (std::uint64_t r = 1; r <= 6; ++r) {
    const auto d = encoded_delta(n, 700, static_cast<std::uint32_t>(r), spec);
    digests[r] = live_round(live, d, 0, outer);
    REQUIRE(log->append(r, 0, 0, digests[r], d).ok());
    if (r == 2) REQUIRE(outer::save_checkpoint(checkpoint_path, live, "cfg").ok());
    if (r == 4) at4 = live;
  }
  auto entries = [&](std::uint64_t from) {
    std::vector<std::shared_ptr<const OpenDelta>> out;
    for (std::uint64_t r = from; r <= 6; ++r) {
      auto h = log->header(r);
      REQUIRE(h.ok());
      REQUIRE(h->has_value());
      CHECK((*h)->digest == digests[r]);
      auto d = OpenDelta::open(log->file(r), **h);
      REQUIRE(d.ok());
      out.push_back(std::move(*d));
    }
    return out;
  };

  Pair p(1024);
  p.sites[1]->call([&] {
    p.b->set_round_steps({"cfg", spec, outer});
    return 0;
  });
  auto on_b = [&](auto fn) { return p.sites[1]->call(fn); };

  SECTION("to a site with nothing: the checkpoint of round 2, then rounds 3..6 stepped on it") {
    auto mapped = MappedCheckpoint::open(checkpoint_path, "cfg");
    REQUIRE(mapped.ok());
    auto source = StateSource::of(*mapped, entries(3));
    CHECK(source->round() == 6);
    CHECK(source->digest() == digests[6]);
    const StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", source); });
    CHECK(offer.round == 6);
    CHECK(offer.anchor_digest == digests[6]);
    CHECK(offer.base_round == std::optional<std::uint64_t>(2));
    CHECK(offer.base_digest == digests[2]);
    CHECK_FALSE(offer.from_held);
    REQUIRE(offer.deltas.size() == 4);
    CHECK(offer.deltas.front().round == 3);
    const std::uint64_t frames = offer_frames(offer).total;
    CHECK(frames > 10);  // 5 anchor, 5 momentum, then the entries' frames
    REQUIRE(on_b([&] { return p.b->receive("a", offer); }).ok());
    REQUIRE(p.sites[0]->call([&] { return p.a->accept("b", {"sync", 6}); }) == "");
    // Before a frame goes, the holder writes a checkpoint of round 6 over
    // the file it offered and cuts its log: the transfer does not notice.
    REQUIRE(outer::save_checkpoint(checkpoint_path, live, "cfg").ok());
    source.reset();
    mapped->reset();
    REQUIRE(log->cut_through(6).ok());
    CHECK(log->rounds().empty());
    auto sent = p.send(6);
    REQUIRE(sent.ok());
    CHECK_THAT(*sent, Catch::StartsWith("state of round 6 sent to b: "));
    CHECK_THAT(*sent, Catch::EndsWith(" (as the state of round 2 and rounds 3..6 of the round log)"));
    const auto outcomes = p.outcomes_after(frames);
    REQUIRE(outcomes.size() == frames);
    CHECK(outcomes.back() == StateFrameOutcome::arrived);
    outer::OuterState mine;
    auto installed = on_b([&] { return p.b->install(mine, {}, {}); });
    REQUIRE(installed.ok());
    CHECK(installed->round == 6);
    CHECK(installed->base_round == 2);
    CHECK(installed->rounds_stepped == 4);
    CHECK(installed->entries.empty());  // stepped on the holder's checkpoint: the asker's log cannot reach it
    CHECK_THAT(installed->note, Catch::StartsWith("state of round 6 received from a: 5000 parameters, "));
    CHECK_THAT(installed->note, Catch::EndsWith(" (as the state of round 2 and rounds 3..6 of the round log)"));
    CHECK(mine.round == 6);
    CHECK(same_bits(mine.anchor, live.anchor));
    CHECK(same_bits(mine.momentum, live.momentum));
  }

  SECTION("to a site that holds round 4: only rounds 5 and 6, stepped on its own state") {
    auto source = StateSource::from_held(4, digests[4], n, live.layout, entries(5));
    const StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", source); });
    CHECK(offer.from_held);
    CHECK(offer.base_round == std::optional<std::uint64_t>(4));
    CHECK(offer.momentum_digest.empty());
    const std::uint64_t frames = offer_frames(offer).total;
    CHECK(offer_frames(offer).chunks == 0);
    CHECK(source->bytes() < n * sizeof(float));  // q8: about a byte per value per round
    outer::OuterState mine = at4;
    on_b([&] {
      p.b_held = &mine;
      return 0;
    });
    REQUIRE(on_b([&] { return p.b->receive("a", offer); }).ok());
    REQUIRE(p.sites[0]->call([&] { return p.a->accept("b", {"sync", 6}); }) == "");
    REQUIRE(p.send(6).ok());
    const auto outcomes = p.outcomes_after(frames);
    REQUIRE(outcomes.size() == frames);
    CHECK(outcomes.back() == StateFrameOutcome::arrived);
    CHECK(mine.round == 4);  // not yet installed: its own state is untouched
    CHECK(same_bits(mine.anchor, at4.anchor));
    auto installed = on_b([&] { return p.b->install(mine, {}, {}); });
    REQUIRE(installed.ok());
    CHECK_THAT(installed->note,
               Catch::EndsWith(", anchor " + digests[6] + " (as rounds 5..6 of the round log, on round 4)"));
    // Stepped on b's own state: the entries come back to be kept in b's own
    // log, and stepping them again on round 4 gives round 6 bit for bit.
    REQUIRE(installed->entries.size() == 2);
    outer::OuterState again = at4;
    for (std::size_t i = 0; i < 2; ++i) {
      RoundDelta e = installed->entries[i];
      CHECK(e.round == 5 + i);
      CHECK(e.digest == digests[5 + i]);
      auto stepped = step_round_delta(again, e, spec, outer);
      REQUIRE(stepped.ok());
      CHECK(*stepped == digests[5 + i]);
    }
    CHECK(same_bits(again.anchor, live.anchor));
    CHECK(mine.round == 6);
    CHECK(same_bits(mine.anchor, live.anchor));
    CHECK(same_bits(mine.momentum, live.momentum));
  }

  // Rounds 5 and 6 sent to b, which holds `mine` (and is told the offer
  // as `told` changes it): what each frame did.
  auto send_from_held = [&](outer::OuterState& mine, std::function<void(StateOfferMessage&)> told = {}) {
    auto source = StateSource::from_held(4, digests[4], n, live.layout, entries(5));
    on_b([&] {
      p.b_held = &mine;
      return 0;
    });
    const StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", source); });
    StateOfferMessage to_b = offer;
    if (told) told(to_b);
    REQUIRE(on_b([&] { return p.b->receive("a", to_b); }).ok());
    REQUIRE(p.sites[0]->call([&] { return p.a->accept("b", {"sync", 6}); }) == "");
    REQUIRE(p.send(6).ok());
    auto outcomes = p.outcomes_after(offer_frames(offer).total);
    REQUIRE(!outcomes.empty());
    return outcomes;
  };

  SECTION("stepped in place: no copy of the state; installed into the state it was stepped on") {
    outer::OuterState mine = at4;
    on_b([&] {
      p.b_in_place = true;
      return 0;
    });
    const auto outcomes = send_from_held(mine);
    CHECK(outcomes.back() == StateFrameOutcome::arrived);
    // Stepped where it lies: the anchor is round 6's already, the round is set at install.
    CHECK(mine.round == 4);
    CHECK(same_bits(mine.anchor, live.anchor));
    CHECK(same_bits(mine.momentum, live.momentum));
    outer::OuterState other = at4;
    auto refused = on_b([&] { return p.b->install(other, {}, {}); });
    CHECK(refused.status().code() == Err::internal);
    CHECK(same_bits(other.anchor, at4.anchor));
    auto installed = on_b([&] { return p.b->install(mine, {}, {}); });
    REQUIRE(installed.ok());
    CHECK(installed->round == 6);
    CHECK_THAT(installed->note, Catch::EndsWith(" (as rounds 5..6 of the round log, on round 4), stepped where this "
                                                "site's state lies"));
    CHECK(installed->entries.size() == 2);
    CHECK(mine.round == 6);
    CHECK(same_bits(mine.anchor, live.anchor));
    CHECK(same_bits(mine.momentum, live.momentum));
  }

  // In place, round `wrong`'s step gives another anchor than the committed one.
  auto lost_at = [&](std::size_t wrong) {
    on_b([&] {
      p.b_in_place = true;
      return 0;
    });
    outer::OuterState mine = at4;
    const auto outcomes =
        send_from_held(mine, [&](StateOfferMessage& o) { o.deltas[wrong].digest = "00000000deadbeef"; });
    CHECK(outcomes.back() == StateFrameOutcome::failed);
    CHECK(on_b([&] { return p.last_lost; }));
    CHECK_THAT(on_b([&] { return p.last_error; }),
               Catch::Contains(cat("round ", 5 + wrong, " from a's round log gives anchor ")));
    CHECK_FALSE(same_bits(mine.anchor, at4.anchor));  // changed where it lay: the caller drops it
  };
  SECTION("in place, the first round's step gives another anchor: the state is lost, and it says so") { lost_at(0); }
  SECTION("in place, the second round's step gives another anchor: the state is lost") { lost_at(1); }

  SECTION("in place, an entry that fails its checks before any step leaves the state as it was") {
    flip_byte(log->file(6), kEntryLastLine + 10);  // the second entry: the first is checked and not stepped either
    on_b([&] {
      p.b_in_place = true;
      return 0;
    });
    outer::OuterState mine = at4;
    CHECK(send_from_held(mine).back() == StateFrameOutcome::failed);
    CHECK_FALSE(on_b([&] { return p.last_lost; }));
    CHECK_THAT(on_b([&] { return p.last_error; }), Catch::Contains("round 6's Δ from a is damaged"));
    CHECK(same_bits(mine.anchor, at4.anchor));
    CHECK(same_bits(mine.momentum, at4.momentum));
  }

  SECTION("a damaged entry voids the transfer, naming the round and the holder") {
    flip_byte(log->file(5), kEntryLastLine + 10);  // in a chunk: the header still reads, the frames carry the damage
    outer::OuterState mine = at4;
    const auto outcomes = send_from_held(mine);
    CHECK(outcomes.back() == StateFrameOutcome::failed);
    CHECK_THAT(on_b([&] { return p.last_error; }), Catch::Contains("round 5's Δ from a is damaged"));
    CHECK(mine.round == 4);
    CHECK(same_bits(mine.anchor, at4.anchor));
  }

  SECTION("an entry that is not the one offered (another first line) voids the transfer") {
    outer::OuterState mine = at4;
    const auto outcomes = send_from_held(mine, [](StateOfferMessage& o) { o.deltas[0].hash = "ffffffffffffffff"; });
    CHECK(outcomes.back() == StateFrameOutcome::failed);
    CHECK_THAT(on_b([&] { return p.last_error; }), Catch::Contains("round 5's Δ from a is not the entry offered"));
  }

  SECTION("rounds offered from a state the asker no longer holds are refused") {
    outer::OuterState mine = at4;
    mine.anchor[17] += 1.0f;  // another state of round 4
    CHECK(send_from_held(mine).back() == StateFrameOutcome::failed);
    CHECK_THAT(on_b([&] { return p.last_error; }), Catch::Contains("start at round 4's anchor " + digests[4]));
  }

  SECTION("a site that cannot step entries refuses an offer of them") {
    auto plain = std::make_unique<StateTransfers>("sync", 1, p.sites[1]->mesh(), 1024);
    auto source = StateSource::from_held(4, digests[4], n, live.layout, entries(5));
    const StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", source); });
    auto refused = on_b([&] { return plain->receive("a", offer); });
    CHECK(refused.status().code() == Err::invalid_argument);
    CHECK_THAT(refused.status().message(), Catch::Contains("which this site cannot step"));
  }
  fs::remove_all(dir);
}

TEST_CASE(
    "a checkpoint this site wrote or checked is mapped without a pass over its anchor; any other file is checked") {
  const fs::path dir = fresh_dir("mapped-checkpoint");
  fs::create_directories(dir);
  const fs::path path = dir / "checkpoint.safetensors";
  const outer::OuterState state = initial_state(5000);
  REQUIRE(outer::save_checkpoint(path, state, "cfg").ok());
  const auto written = FileIdentity::of(path);
  REQUIRE(written);
  CHECK(MappedCheckpoint::open(path, "cfg", written).ok());
  CHECK(MappedCheckpoint::open(path, "cfg").ok());
  // A value of the anchor (the first tensor after the header) damaged on
  // the disk, the file's times put back.
  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    std::uint64_t header_len = 0;
    f.read(reinterpret_cast<char*>(&header_len), sizeof header_len);
    f.seekp(static_cast<std::streamoff>(sizeof header_len + header_len + 400));
    const char bad[4] = {0x7f, 0x7f, 0x7f, 0x7f};
    f.write(bad, 4);
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  REQUIRE(FileIdentity::of(path) == written);
  // Trusted as written: the damage is not seen here (the receiver's digest check sees it).
  CHECK(MappedCheckpoint::open(path, "cfg", written).ok());
  // Not known: checked, and refused.
  const auto unknown = MappedCheckpoint::open(path, "cfg");
  CHECK(unknown.status().code() == Err::mismatch);
  CHECK_THAT(unknown.status().message(), Catch::Contains("the file is corrupted"));
  // Another file at the path (a new checkpoint renamed over it) is not the one checked.
  REQUIRE(outer::save_checkpoint(path, state, "cfg").ok());
  CHECK_FALSE(FileIdentity::of(path) == written);
}
