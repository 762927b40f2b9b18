// STATE_SYNC between two loopback sites: a holder offers its state, the
// asker accepts, the frames cross both connections and the asker installs
// exactly the holder's bits, those of the round offered though the holder's
// state moved on; an accept that was not offered, frames from a peer it does
// not receive from and a state whose anchor does not match its offer all
// leave the asker's state unchanged.
#include <algorithm>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/digest.h"
#include "daemon/state_source.h"
#include "daemon/state_transfers.h"
#include "daemon/tests/state_pair.h"
#include "transport/loopback.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::transport;
using namespace std::chrono_literals;
using geoloco::daemon::testing::Pair;
using geoloco::daemon::testing::same_bits;

namespace {

constexpr std::uint64_t kChunk = 1024;   // the smallest frame an offer may name
constexpr std::uint64_t kValues = 5000;  // 5 frames per tensor, the last one short

outer::OuterState holder_state(std::uint64_t round) {
  outer::OuterState s;
  s.job = "sync";
  s.round = round;
  s.layout = {{"w", {50, 80}, 0}, {"b", {1000}, 4000}};
  s.anchor.resize(kValues);
  s.momentum.resize(kValues);
  for (std::uint64_t i = 0; i < kValues; ++i) {
    s.anchor[i] = 0.25f * static_cast<float>(i) - 3.0f;
    s.momentum[i] = 1.0f / static_cast<float>(i + 1);
  }
  return s;
}

}  // namespace

TEST_CASE("a state crosses from holder to asker bit for bit, with its layout, round and wait") {
  Pair p(kChunk);
  const outer::OuterState held = holder_state(7);
  const auto t0 = StateTransfers::Clock::time_point{} + 100s;
  p.sites[1]->call([&] {
    p.b->requested(t0);
    return 0;
  });

  StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  CHECK(offer.job == "sync");
  CHECK(offer.round == 7);
  CHECK(offer.values == kValues);
  CHECK(offer.chunk_values == kChunk);
  CHECK(offer.anchor_digest == digest_hex(held.anchor_digest()));
  CHECK(offer.layout == held.layout);
  CHECK(p.sites[0]->call([&] { return p.a->offers_pending(); }) == 1);

  auto accepts = p.sites[1]->call([&] { return p.b->receive("a", offer); });
  REQUIRE(accepts.ok());
  REQUIRE(accepts->size() == 1);
  const StateAcceptMessage accept = accepts->front().accept;
  CHECK(accepts->front().peer == "a");
  CHECK(accept.job == "sync");
  CHECK(accept.round == 7);
  CHECK(accept.missing.empty());  // every frame
  CHECK(p.sites[0]->call([&] { return p.a->accept("b", accept); }) == "");
  CHECK(p.sites[0]->call([&] { return p.a->offers_pending(); }) == 1);  // good while the state is round 7

  auto sent = p.send(7);
  REQUIRE(sent.ok());
  CHECK(sent->find("state of round 7 sent to b: ") == 0);
  const std::uint64_t frame_bytes = 10 * kFrameHeaderSize + 2 * kValues * sizeof(float);
  CHECK(sent->find(cat(frame_bytes, " bytes in ")) != std::string::npos);

  using K = StateFrameOutcome::Kind;
  std::vector<K> expected(9, K::progress);
  expected.push_back(K::arrived);
  CHECK(p.outcomes_after(10) == expected);

  outer::OuterState mine;  // a joining site: nothing held yet
  auto installed = p.sites[1]->call([&] { return p.b->install(mine, {}, t0 + 2500ms); });
  REQUIRE(installed.ok());
  CHECK(installed->round == 7);
  CHECK(installed->bytes == frame_bytes);
  CHECK(installed->seconds == Approx(2.5));
  CHECK(installed->note == cat("state of round 7 received from a: 5000 parameters, ", frame_bytes,
                               " bytes in 2.50 s (0.0 MB/s), anchor ", offer.anchor_digest));
  CHECK(mine.job == "sync");
  CHECK(mine.round == 7);
  CHECK(mine.layout == held.layout);
  CHECK(same_bits(mine.anchor, held.anchor));
  CHECK(same_bits(mine.momentum, held.momentum));
  CHECK_FALSE(p.sites[1]->call([&] { return p.b->receiving(); }));
  // Nothing left to install: refused, the state stays.
  auto again = p.sites[1]->call([&] { return p.b->install(mine, {}, t0); });
  CHECK(again.status().code() == Err::internal);
  CHECK(mine.round == 7);
}

TEST_CASE("an accept is answered only for the round last offered to that peer, whatever the state did since") {
  Pair p(kChunk);
  outer::OuterState held = holder_state(3);
  auto on_a = [&](auto fn) { return p.sites[0]->call(fn); };
  // Never offered.
  CHECK(on_a([&] {
          return p.a->accept("b", {"sync", 3});
        }) == "b accepts a state of round 3 that this site did not offer it");
  // Offered round 3, a late accept of round 2: refused; the offer of round 3
  // stays good for its accepts while the state is round 3's (a second one:
  // b's share changed after this site's frames were all sent).
  on_a([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  CHECK(on_a([&] {
          return p.a->accept("b", {"sync", 2});
        }) == "b accepts a state of round 2 that this site did not offer it");
  CHECK(on_a([&] { return p.a->accept("b", {"sync", 3}); }) == "");
  CHECK(on_a([&] { return p.a->accept("b", {"sync", 3, {2, 4}}); }) == "");
  CHECK(on_a([&] {
          return p.a->accept("c", {"sync", 3});
        }) == "c accepts a state of round 3 that this site did not offer it");
  // Offered, then a round committed before the accept: the offer stands
  // (what was offered does not move with the state).
  on_a([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  held.round = 4;
  CHECK(on_a([&] { return p.a->accept("b", {"sync", 3}); }) == "");
  // An offer without state carries the reason and promises nothing.
  StateOfferMessage none = on_a([&] { return p.a->offer("b", nullptr, "no state yet"); });
  CHECK(none.reason == "no state yet");
  CHECK(none.values == 0);
  CHECK(on_a([&] { return p.a->offers_pending(); }) == 0);
  auto refused = p.sites[1]->call([&] { return p.b->receive("a", none); });
  CHECK(refused.status().code() == Err::invalid_argument);
  CHECK(refused.status().message() == "a offers no state: no state yet");
}

TEST_CASE("a state that moves on during the transfer does not change what is sent: the offered round arrives whole") {
  Pair p(kChunk);
  outer::OuterState held = holder_state(5);
  const outer::OuterState at_offer = held;
  StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  REQUIRE(p.sites[1]->call([&] { return p.b->receive("a", offer); }).ok());
  REQUIRE(p.sites[0]->call([&] { return p.a->accept("b", {"sync", 5}); }) == "");
  // A round commits between the accept and the frames: the live state moves.
  held.round = 6;
  for (auto& v : held.anchor) v += 1.0f;
  REQUIRE(p.send(5).ok());
  using K = StateFrameOutcome::Kind;
  std::vector<K> expected(9, K::progress);
  expected.push_back(K::arrived);
  CHECK(p.outcomes_after(10) == expected);
  outer::OuterState mine = holder_state(2);
  auto installed = p.sites[1]->call([&] { return p.b->install(mine, {}, {}); });
  REQUIRE(installed.ok());
  CHECK(mine.round == 5);
  CHECK(same_bits(mine.anchor, at_offer.anchor));
  CHECK(same_bits(mine.momentum, at_offer.momentum));
}

TEST_CASE("an anchor that does not match its offer's digest voids the transfer; later frames are dropped") {
  Pair p(kChunk);
  outer::OuterState held = holder_state(9);
  StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  // The offer b gets names another anchor than the frames carry (a holder
  // whose memory went bad between its digest and its frames).
  StateOfferMessage told = offer;
  held.anchor[4321] += 1.0f;
  told.anchor_digest = digest_hex(held.anchor_digest());
  REQUIRE(p.sites[1]->call([&] { return p.b->receive("a", told); }).ok());
  REQUIRE(p.sites[0]->call([&] { return p.a->accept("b", {"sync", 9}); }) == "");
  REQUIRE(p.send(9).ok());
  using K = StateFrameOutcome::Kind;
  std::vector<K> got = p.outcomes_after(10);
  REQUIRE(got.size() == 10);
  CHECK(std::count(got.begin(), got.end(), K::failed) == 1);
  CHECK(std::count(got.begin(), got.end(), K::arrived) == 0);
  CHECK(p.sites[1]->call([&] { return p.last_error; }).find("the anchor from a has digest ") == 0);
  CHECK_FALSE(p.sites[1]->call([&] { return p.b->receiving(); }));

  // Frames of a transfer from another peer, or after the transfer ended, change nothing.
  FrameHeader h;
  h.type = FrameType::state;
  h.job = 1;
  h.round = 9;
  h.chunk = 0;
  std::vector<float> values(kChunk, 1.0f);
  auto frame = std::as_bytes(std::span<const float>(values));
  auto outcome = p.sites[1]->call([&] { return p.b->on_frame("a", h, frame).kind; });
  CHECK(outcome == K::dropped);
  REQUIRE(p.sites[1]->call([&] { return p.b->receive("a", offer); }).ok());
  CHECK(p.sites[1]->call([&] { return p.b->on_frame("c", h, frame).kind; }) == K::dropped);
  CHECK(p.sites[1]->call([&] { return p.b->receiving(); }));
  // A frame of the wrong size from the right peer voids it.
  CHECK(p.sites[1]->call([&] { return p.b->on_frame("a", h, frame.first(16)).kind; }) == K::failed);
  CHECK_FALSE(p.sites[1]->call([&] { return p.b->receiving(); }));
}

namespace {
// State frame i of `s` (anchor frames 0..4, momentum 5..9), as a holder sends it.
std::pair<FrameHeader, std::vector<std::byte>> state_frame(const outer::OuterState& s, std::uint32_t i) {
  const std::uint64_t chunks = (kValues + kChunk - 1) / kChunk;
  const auto& tensor = i < chunks ? s.anchor : s.momentum;
  const std::uint64_t begin = (i % chunks) * kChunk, size = std::min<std::uint64_t>(kChunk, kValues - begin);
  FrameHeader h;
  h.type = FrameType::state;
  h.job = 1;
  h.round = s.round;
  h.chunk = i;
  const auto* bytes = reinterpret_cast<const std::byte*>(tensor.data() + begin);
  return {h, std::vector<std::byte>(bytes, bytes + size * sizeof(float))};
}
}  // namespace

TEST_CASE("a transfer whose donor stops goes on from another holder of the same state with the frames it has") {
  Pair p(kChunk);
  const outer::OuterState held = holder_state(7);
  StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  auto on_b = [&](auto fn) { return p.sites[1]->call(fn); };
  REQUIRE(on_b([&] { return p.b->receive("a", offer); }).ok());
  for (std::uint32_t i : {0u, 1u, 2u, 5u}) {
    auto [h, payload] = state_frame(held, i);
    CHECK(on_b([&] { return p.b->on_frame("a", h, payload).kind; }) == StateFrameOutcome::progress);
  }
  // a stops (the machine lets it go: it is told to stop); c holds the same state and offers it.
  auto let_go = on_b([&] { return p.b->release("a"); });
  REQUIRE(let_go.size() == 1);  // nobody else sends: c's offer will take it all
  CHECK(let_go[0].peer == "a");
  CHECK(let_go[0].accept.stop);
  auto resumed = on_b([&] { return p.b->receive("c", offer); });
  REQUIRE(resumed.ok());
  REQUIRE(resumed->size() == 1);
  CHECK(resumed->front().peer == "c");
  CHECK(resumed->front().accept.missing == std::vector<std::uint64_t>{3, 5, 6, 10});
  {
    // a's, late (it was on the wire): taken, it counts.
    auto [h, payload] = state_frame(held, 3);
    CHECK(on_b([&] { return p.b->on_frame("a", h, payload).kind; }) == StateFrameOutcome::progress);
  }
  StateFrameOutcome::Kind last = StateFrameOutcome::dropped;
  for (std::uint32_t i : {3u, 4u, 6u, 7u, 8u, 9u}) {
    auto [h, payload] = state_frame(held, i);
    last = on_b([&] { return p.b->on_frame("c", h, payload).kind; });
  }
  CHECK(last == StateFrameOutcome::arrived);
  outer::OuterState mine;
  auto installed = on_b([&] { return p.b->install(mine, {}, {}); });
  REQUIRE(installed.ok());
  CHECK(installed->resumed_frames == 4);
  CHECK(installed->note.find("state of round 7 received from a and c (4 of its 10 frames kept from before the "
                             "transfer stalled): 5000 parameters, ") == 0);
  CHECK(same_bits(mine.anchor, held.anchor));
  CHECK(same_bits(mine.momentum, held.momentum));

  SECTION("an offer of another round starts over") {
    REQUIRE(on_b([&] { return p.b->receive("a", offer); }).ok());
    auto [h, payload] = state_frame(held, 0);
    (void)on_b([&] { return p.b->on_frame("a", h, payload).kind; });
    StateOfferMessage newer = offer;
    newer.round = 8;
    auto fresh = on_b([&] { return p.b->receive("c", newer); });
    REQUIRE(fresh.ok());
    REQUIRE(fresh->size() == 1);
    CHECK(fresh->front().accept.missing.empty());
  }
}

TEST_CASE("a holder asked for the frames still missing sends only those") {
  Pair p(kChunk);
  const outer::OuterState held = holder_state(7);
  StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  auto on_b = [&](auto fn) { return p.sites[1]->call(fn); };
  // b took frames 0-2 and 5 from another site that stopped, then a's offer.
  REQUIRE(on_b([&] { return p.b->receive("x", offer); }).ok());
  for (std::uint32_t i : {0u, 1u, 2u, 5u}) {
    auto [h, payload] = state_frame(held, i);
    REQUIRE(on_b([&] { return p.b->on_frame("x", h, payload).kind; }) == StateFrameOutcome::progress);
  }
  CHECK(on_b([&] { return p.b->release("x"); }).size() == 1);  // x is told to stop
  auto accepts = on_b([&] { return p.b->receive("a", offer); });
  REQUIRE(accepts.ok());
  REQUIRE(accepts->size() == 1);
  const StateAcceptMessage accept = accepts->front().accept;
  REQUIRE(p.sites[0]->call([&] { return p.a->accept("b", accept); }) == "");
  auto sent = p.sites[0]->spawn([&]() { return p.a->send("b", 7, accept.missing); }).get();
  REQUIRE(sent.ok());
  // Frames 3, 6, 7, 8 are whole; 4 and 9 are the short last ones of each tensor.
  const std::uint64_t six_frames = 6 * kFrameHeaderSize + (4 * kChunk + 2 * (kValues - 4 * kChunk)) * sizeof(float);
  CHECK(sent->find(cat("the rest of the state of round 7 sent to b: ", six_frames, " bytes in ")) == 0);
  auto outcomes = p.outcomes_after(6);
  REQUIRE(outcomes.size() == 6);
  CHECK(outcomes.back() == StateFrameOutcome::arrived);
  outer::OuterState mine;
  auto installed = on_b([&] { return p.b->install(mine, {}, {}); });
  REQUIRE(installed.ok());
  CHECK(same_bits(mine.anchor, held.anchor));
  CHECK(same_bits(mine.momentum, held.momentum));
}

TEST_CASE("the frames still missing collapse into at most the ranges an accept may carry") {
  StateOfferMessage offer{"sync", 7, "0123456789abcdef", kValues, kChunk, "", {}};
  auto r = StateReceiver::start("a", offer);
  REQUIRE(r.ok());
  const outer::OuterState held = holder_state(7);
  for (std::uint32_t i : {1u, 3u, 5u, 7u}) {
    auto [h, payload] = state_frame(held, i);
    REQUIRE(r->add("a", h, payload).ok());
  }
  CHECK(r->missing() == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 10});
  CHECK(r->missing(2) == std::vector<std::uint64_t>{0, 1, 2, 10});  // frames 3, 5, 7 asked again
  r->remove_donor("a");
  r->add_donor("c");
  for (std::uint32_t i : {2u, 3u}) {  // 3 came already: ignored, not a broken transfer
    auto [h, payload] = state_frame(held, i);
    CHECK(r->add("c", h, payload).ok());
  }
  CHECK(r->frames_taken() == 5);
}

TEST_CASE(
    "with two holders expected, the first is asked for its half; the second takes the rest, or the first "
    "does once its half is in") {
  StateOfferMessage offer{"sync", 7, "0123456789abcdef", kValues, kChunk, "", {}};  // 10 frames
  auto r = StateReceiver::start("a", offer);
  REQUIRE(r.ok());
  auto first = r->share_first("a", 2);
  REQUIRE(first.size() == 1);
  CHECK(first[0] == std::make_pair(std::string("a"), std::vector<std::uint64_t>{0, 5}));
  CHECK(r->unowned() == 5);
  SECTION("the second holder offers: it takes the frames nobody was asked for") {
    r->add_donor("b");
    auto shares = r->share_with("b");
    CHECK(shares == StateReceiver::Shares{{"b", {5, 10}}});
    CHECK(r->unowned() == 0);
  }
  SECTION("it does not: once a's half is in, a is given the rest") {
    const outer::OuterState held = holder_state(7);
    for (std::uint32_t i = 0; i < 5; ++i) {
      auto [h, payload] = state_frame(held, i);
      REQUIRE(r->add("a", h, payload).ok());
    }
    CHECK(r->take_share_done() == std::vector<std::string>{"a"});
    auto rest = r->share_out("");
    CHECK(rest == StateReceiver::Shares{{"a", {5, 10}}});
    CHECK(r->unowned() == 0);
  }
}

TEST_CASE(
    "two holders send one state at once: the second takes the upper half of what is missing, the first's "
    "share shrinks while it sends, and the state arrives whole, each frame taken once") {
  // a's egress is capped so that its transfer is still going when b joins.
  auto federation = loopback::Federation::create({"a", "b", "c"});
  REQUIRE(federation.ok());
  std::vector<std::unique_ptr<loopback::Site>> sites;
  std::vector<loopback::Site*> raw;
  for (const std::string name : {"a", "b", "c"}) {
    auto options = loopback::test_options();
    if (name == "a") options.rate_limit_mbit = 40;
    auto site = loopback::Site::create(name, (*federation)->files(name), options, 1, {"a", "b", "c"});
    REQUIRE(site.ok());
    raw.push_back(site->get());
    sites.push_back(std::move(*site));
  }
  for (auto& s : sites) REQUIRE(s->connect(raw).ok());
  for (auto& s : sites) REQUIRE(s->spawn([&s]() { return s->mesh().wait_connected({"a", "b", "c"}, 20s); }).get().ok());
  constexpr std::uint64_t kBig = 2u << 20, kFrame = 256u << 10;  // 8 frames a tensor, 16 in all
  outer::OuterState held;
  held.job = "sync";
  held.round = 9;
  held.layout = {{"w", {kBig}, 0}};
  held.anchor.resize(kBig);
  held.momentum.resize(kBig);
  for (std::uint64_t i = 0; i < kBig; ++i) {
    held.anchor[i] = static_cast<float>(i % 977) * 0.5f;
    held.momentum[i] = static_cast<float>(i % 13) - 6.0f;
  }
  StateTransfers a("sync", 1, sites[0]->mesh(), kFrame), b("sync", 1, sites[1]->mesh(), kFrame),
      c("sync", 1, sites[2]->mesh(), kFrame);
  std::vector<StateFrameOutcome::Kind> outcomes;  // on c's thread
  sites[2]->call([&] {
    sites[2]->mesh().set_control_handler([&](const std::string& peer, const FrameHeader& h, Buffer payload) {
      outcomes.push_back(c.on_frame(peer, h, payload).kind);
      return Status();
    });
    return 0;
  });
  auto on_c = [&](auto fn) { return sites[2]->call(fn); };

  const StateOfferMessage from_a = sites[0]->call([&] { return a.offer("c", StateSource::copy_of(held)); });
  auto first = on_c([&] { return c.receive("a", from_a); });
  REQUIRE(first.ok());
  REQUIRE(first->size() == 1);
  REQUIRE(sites[0]->call([&] { return a.accept("c", first->front().accept); }) == "");
  auto sending_a = sites[0]->spawn([&]() { return a.send("c", 9); });
  // Some of a's frames are in (its 16 MiB take over 3 s at 40 Mbit/s):
  // waited for, not slept on, so a loaded machine only makes it later.
  const auto frames_in = [&] {
    const auto seen = on_c([&] { return outcomes; });
    return std::count(seen.begin(), seen.end(), StateFrameOutcome::progress);
  };
  for (const auto until = std::chrono::steady_clock::now() + 20s;
       frames_in() == 0 && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(5ms);
  REQUIRE(frames_in() > 0);

  const StateOfferMessage from_b = sites[1]->call([&] { return b.offer("c", StateSource::copy_of(held)); });
  auto split = on_c([&] { return c.receive("b", from_b); });
  REQUIRE(split.ok());
  REQUIRE(split->size() == 2);
  CHECK((*split)[0].peer == "a");
  CHECK((*split)[1].peer == "b");
  // The shares cover what is missing, a the lower frames, b the upper ones.
  const auto& share_a = (*split)[0].accept.missing;
  const auto& share_b = (*split)[1].accept.missing;
  REQUIRE_FALSE(share_a.empty());
  REQUIRE_FALSE(share_b.empty());
  CHECK(share_a.back() <= share_b.front());
  CHECK(share_b.back() == 16);
  CHECK(sites[0]->call([&] { return a.update("c", (*split)[0].accept); }));  // a is sending: its share shrinks
  REQUIRE(sites[1]->call([&] { return b.accept("c", (*split)[1].accept); }) == "");
  auto sent_b = sites[1]->spawn([&]() { return b.send("c", 9, (*split)[1].accept.missing); }).get();
  auto sent_a = sending_a.get();
  REQUIRE(sent_a.ok());
  REQUIRE(sent_b.ok());

  // Arrived once; a frame both sent (in flight while a's share shrank) may
  // come after, and is dropped without voiding the transfer.
  std::vector<StateFrameOutcome::Kind> got;
  for (int tries = 0; tries < 500; ++tries) {
    got = on_c([&] { return outcomes; });
    if (std::count(got.begin(), got.end(), StateFrameOutcome::arrived) == 1) break;
    std::this_thread::sleep_for(10ms);
  }
  CHECK(std::count(got.begin(), got.end(), StateFrameOutcome::arrived) == 1);
  CHECK(std::count(got.begin(), got.end(), StateFrameOutcome::failed) == 0);
  outer::OuterState mine;
  auto installed = on_c([&] { return c.install(mine, {}, {}); });
  REQUIRE(installed.ok());
  CHECK(installed->senders == std::vector<std::string>{"a", "b"});
  CHECK(installed->note.find("state of round 9 received from a and b: ") == 0);
  CHECK(installed->bytes == 16 * kFrameHeaderSize + 2 * kBig * sizeof(float));  // each frame counted once
  CHECK(same_bits(mine.anchor, held.anchor));
  CHECK(same_bits(mine.momentum, held.momentum));
  // a sent fewer than all 16 frames: b's share was not sent twice.
  const auto bytes_of = [](const std::string& line) {
    const auto at = line.find(": ") + 2;
    return std::stoull(line.substr(at, line.find(" bytes") - at));
  };
  const std::uint64_t frame = kFrameHeaderSize + kFrame * sizeof(float);
  CHECK(bytes_of(*sent_a) < 16 * frame);
  CHECK(bytes_of(*sent_a) + bytes_of(*sent_b) <= 16 * frame + 4 * frame);  // at most a few frames in flight twice
}

TEST_CASE("the momentum is checked against the offer's digest too; another state of the round cannot join") {
  Pair p(kChunk);
  const outer::OuterState held = holder_state(7);
  StateOfferMessage offer = p.sites[0]->call([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  CHECK(offer.momentum_digest == digest_hex(digest_f32(held.momentum)));
  auto on_b = [&](auto fn) { return p.sites[1]->call(fn); };
  REQUIRE(on_b([&] { return p.b->receive("a", offer); }).ok());
  // A holder of other bits of round 7 offers meanwhile: refused, the transfer goes on.
  StateOfferMessage other = offer;
  other.anchor_digest = "00000000deadbeef";
  auto refused = on_b([&] { return p.b->receive("c", other); });
  CHECK(refused.status().code() == Err::mismatch);
  CHECK_THAT(refused.status().message(),
             Catch::StartsWith("c offers another state of round 7 (anchor 00000000deadbeef)"));
  CHECK(on_b([&] { return p.b->receiving(); }));
  // A momentum that is not the one offered (one value changed): refused at the end.
  outer::OuterState bent = held;
  bent.momentum[4321] += 1.0f;
  StateFrameOutcome last;
  for (std::uint32_t i = 0; i < 10; ++i) {
    auto [h, payload] = state_frame(bent, i);
    last = on_b([&] { return p.b->on_frame("a", h, payload); });
  }
  CHECK(last.kind == StateFrameOutcome::failed);
  CHECK_THAT(last.error, Catch::StartsWith("the momentum from a has digest "));
  CHECK_FALSE(on_b([&] { return p.b->receiving(); }));
}

TEST_CASE("a holder's share changes while it sends: narrowed, widened, stopped; no frame is sent twice") {
  FrameWants wants(10, {});  // every frame
  CHECK(wants.next() == std::optional<std::uint64_t>(0));
  CHECK(wants.next() == std::optional<std::uint64_t>(1));
  int changes = 0;
  wants.on_change = [&changes] { ++changes; };
  REQUIRE(wants.set({0, 4}));  // narrowed to frames 0-3 (another holder took the rest)
  CHECK(wants.next() == std::optional<std::uint64_t>(2));
  CHECK(wants.next() == std::optional<std::uint64_t>(3));
  CHECK_FALSE(wants.next());
  REQUIRE(wants.set({0, 2, 8, 10}));  // widened: 0 and 1 were sent already, 8 and 9 are new
  CHECK(wants.next() == std::optional<std::uint64_t>(8));
  wants.stop();  // let go
  CHECK_FALSE(wants.next());
  CHECK(changes == 3);
  wants.close();  // the send ended
  CHECK_FALSE(wants.set({0, 10}));
  wants.reopen({0, 10});  // a later send of the round to the same peer: only what it never sent
  std::vector<std::uint64_t> rest;
  while (auto f = wants.next()) rest.push_back(*f);
  CHECK(rest == std::vector<std::uint64_t>{4, 5, 6, 7, 9});
}

TEST_CASE("a stop with no send going is handled, and starts none") {
  Pair p(kChunk);
  const outer::OuterState held = holder_state(7);
  (void)p.sites[0]->call([&] { return p.a->offer("b", StateSource::copy_of(held)); });
  CHECK(p.sites[0]->call([&] { return p.a->update("b", StateAcceptMessage{"sync", 7, {}, true}); }));
}
