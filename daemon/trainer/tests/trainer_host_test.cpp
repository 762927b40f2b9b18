// TrainerHost against external trainers, the rounds: the C++ sync client
// (inner/protocol/client.h) on threads plays the trainer, the test's
// coroutine plays the round engine on the io_context. Values are chosen so
// every expected anchor is exact in fp32. (Refusals: trainer_host_refusal_test.cpp.)
#include "daemon/trainer/tests/trainer_host_fixture.h"

using namespace geoloco::daemon::test;

namespace {

asio::awaitable<void> engine_with_initialization(TrainerHost& host) {
  // Nothing is open yet: finishing a round or publishing twice is refused.
  CHECK(host.finish_round(std::vector<float>(9, 0.0f), false).code() == Err::invalid_argument);
  auto init = co_await host.initial_parameters();
  REQUIRE(init.ok());
  std::vector<float> expected{1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(*init == expected);
  CHECK(host.publish_initial(std::vector<float>(8, 0.0f)).code() == Err::invalid_argument);  // wrong size
  REQUIRE(host.publish_initial(*init).ok());
  CHECK(host.publish_initial(*init).code() == Err::invalid_argument);  // once only
  auto again = co_await host.initial_parameters();
  CHECK(again.status().code() == Err::invalid_argument);

  std::vector<float> anchor = *init;
  for (std::uint64_t r = 0; r < 3; ++r) {
    auto phase = co_await host.next_phase();
    REQUIRE(phase.ok());
    CHECK(phase->round == r);
    CHECK(phase->tokens == 101);  // the largest fragment's report
    CHECK(phase->loss == 2.5);    // mean of 2.0 and 3.0
    // The trainer's own clock rides on its SYNC, for watch and the metrics.
    REQUIRE(phase->timing.has_value());
    CHECK(*phase->timing == protocol::SyncTiming{r + 1.0, 2.0 * r + 2.0});
    CHECK(std::vector<float>(phase->replica.begin(), phase->replica.end()) == plus(anchor, 1.0f));
    // The trainer trains from the anchor: it changes only through finish_round().
    CHECK(host.set_anchor(anchor, r).code() == Err::invalid_argument);
    auto same = co_await host.next_phase();  // asked twice: the same phase
    REQUIRE(same.ok());
    CHECK(same->round == r);
    for (std::size_t i = 0; i < anchor.size(); ++i) anchor[i] = 0.5f * (anchor[i] + phase->replica[i]);
    CHECK(host.finish_round(anchor, r == 2, r).code() == Err::invalid_argument);  // next round must follow r
    REQUIRE(host.finish_round(anchor, r == 2).ok());
  }
  CHECK(host.stopped());
  auto after = co_await host.next_phase();
  CHECK(after.status().code() == Err::invalid_argument);
  CHECK(host.stats().rounds == 3);
  CHECK(host.stats().syncs == 6);
}

asio::awaitable<void> engine_after_death_past_sync(TrainerHost& host, std::atomic<bool>& a_gone) {
  auto phase = co_await host.next_phase();
  REQUIRE(phase.ok());
  CHECK(phase->round == 0);
  std::function<bool()> b_waits = [&] {
    return a_gone && host.stats().hellos == 2 && host.snapshot().phase == protocol::Phase::hello_pending;
  };
  const bool waiting = co_await eventually(b_waits, 10s);
  REQUIRE(waiting);
  // B is not welcomed while round 0 is open, and A's replica is still readable.
  CHECK(host.stats().welcomes == 1);
  CHECK(host.stats().departures == 1);
  CHECK(std::vector<float>(phase->replica.begin(), phase->replica.end()) == std::vector<float>(9, 11.0f));
  REQUIRE(host.finish_round(std::vector<float>(9, 20.0f), false).ok());
  CHECK(host.stats().welcomes == 2);
  auto next = co_await host.next_phase();
  REQUIRE(next.ok());
  CHECK(next->round == 1);
  CHECK(std::vector<float>(next->replica.begin(), next->replica.end()) == std::vector<float>(9, 21.0f));
  REQUIRE(host.finish_round(std::vector<float>(9, 30.0f), true).ok());
}

asio::awaitable<void> engine_after_partial_round(TrainerHost& host, std::atomic<bool>& go_b) {
  std::function<bool()> a_left = [&] { return host.stats().departures == 1; };
  const bool left = co_await eventually(a_left, 10s);
  REQUIRE(left);
  CHECK(host.stats().discarded_partial_rounds == 1);
  CHECK(host.next_round() == 3);
  for (const auto& f : host.snapshot().fragments) CHECK_FALSE(f.in_flight);
  go_b = true;
  auto phase = co_await host.next_phase();
  REQUIRE(phase.ok());
  CHECK(phase->round == 3);
  CHECK(std::vector<float>(phase->replica.begin(), phase->replica.end()) == std::vector<float>(9, 5.0f));
  REQUIRE(host.finish_round(std::vector<float>(9, 6.0f), true).ok());
}

// A host that reads the engine's anchor (anchor_view), set for `round`.
Result<std::unique_ptr<TrainerHost>> host_viewing(asio::io_context& io, std::vector<float>& anchor,
                                                  std::uint64_t round) {
  TrainerHostOptions o;
  o.anchor_view = [&anchor] { return std::span<const float>(anchor); };
  auto host = open_host(io, o);
  if (host.ok()) GEOLOCO_TRY((*host)->set_anchor(anchor, round));
  return host;
}

// The engine owns the anchor (anchor_view): the host reads it only to welcome a trainer.
asio::awaitable<void> engine_owning_the_anchor(TrainerHost& host, std::vector<float>& anchor,
                                               std::atomic<bool>& a_gone) {
  auto phase = co_await host.next_phase();
  REQUIRE(phase.ok());
  CHECK(phase->round == 7);
  CHECK(std::vector<float>(phase->replica.begin(), phase->replica.end()) == std::vector<float>(9, 4.0f));
  std::function<bool()> b_waits = [&] { return a_gone && host.snapshot().phase == protocol::Phase::hello_pending; };
  const bool waiting = co_await eventually(b_waits, 10s);
  REQUIRE(waiting);
  for (float& x : anchor) x = 8.0f;  // the outer step, in the engine's own buffer
  REQUIRE(host.finish_round(anchor, false).ok());
  auto next = co_await host.next_phase();
  REQUIRE(next.ok());
  CHECK(next->round == 8);
  CHECK(std::vector<float>(next->replica.begin(), next->replica.end()) == std::vector<float>(9, 9.0f));
  REQUIRE(host.finish_round(anchor, true).ok());
}

}  // namespace

TEST_CASE("an external trainer hands over its initialization and syncs 3 rounds of 2 fragments", "[daemon][trainer]") {
  std::vector<std::jthread> threads;  // declared first: joined after the host is gone
  asio::io_context io;
  TrainerHostOptions o;
  o.fragments = 2;
  auto host = open_host(io, o);
  REQUIRE(host.ok());
  const std::string path = (*host)->options().socket_path;
  TrainerLog a;
  threads.emplace_back([&] {
    auto c = protocol::Client::connect(path, "job-a", layout(), client_options());
    if (!c.ok()) return void(a.status = c.status());
    record_welcome(**c, a);
    for (std::size_t i = 0; i < 9; ++i) (*c)->parameters()[i] = static_cast<float>(i + 1);
    if (Status s = (*c)->send_initial(20'000); !s.ok()) return void(a.status = s);
    a.welcomed.assign((*c)->parameters().begin(), (*c)->parameters().end());
    a.status = train(**c, 3, a);
  });
  test::run_on(io, engine_with_initialization(**host), 20s);
  host->reset();
  threads.clear();
  INFO(a.status.to_string());
  REQUIRE(a.status.ok());
  CHECK_FALSE(a.anchor_ready);
  CHECK(a.next_rounds == std::vector<std::uint64_t>{0, 0});
  REQUIRE(a.anchors.size() == 3);
  // Each round the trainer added 1 and the engine averaged: the anchor grows by 0.5.
  for (std::size_t r = 0; r < 3; ++r) {
    std::vector<float> want(9);
    for (std::size_t i = 0; i < 9; ++i) want[i] = static_cast<float>(i + 1) + 0.5f * static_cast<float>(r + 1);
    CHECK(a.anchors[r] == want);
  }
  CHECK(a.stopped);
}

TEST_CASE("a trainer that dies after its SYNC: the round finishes, the next trainer starts from its anchor",
          "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  auto host = open_host(io, TrainerHostOptions{});
  REQUIRE(host.ok());
  REQUIRE((*host)->set_anchor(std::vector<float>(9, 10.0f), 0).ok());
  const std::string path = (*host)->options().socket_path;
  std::atomic<bool> a_gone{false};
  TrainerLog a, b;
  threads.emplace_back([&] {
    {
      auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
      if (!client.ok()) return void(a.status = client.status());
      for (float& x : (*client)->parameters()) x += 1.0f;
      a.status = (*client)->sync(0, 0, 50, 1.0);
    }  // gone before the RESULT
    a_gone = true;
    auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
    if (!client.ok()) return void(b.status = client.status());
    record_welcome(**client, b);
    b.status = train(**client, 1, b);
  });
  test::run_on(io, engine_after_death_past_sync(**host, a_gone), 30s);
  host->reset();
  threads.clear();
  REQUIRE(a.status.ok());
  INFO(b.status.to_string());
  REQUIRE(b.status.ok());
  CHECK(b.welcomed == std::vector<float>(9, 20.0f));
  CHECK(b.next_rounds == std::vector<std::uint64_t>{1});
  REQUIRE(b.anchors.size() == 1);
  CHECK(b.anchors[0] == std::vector<float>(9, 30.0f));
  CHECK(b.stopped);
}

TEST_CASE("a trainer that leaves after some fragments of a round: the next trainer redoes the round",
          "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  TrainerHostOptions o;
  o.fragments = 2;
  auto host = open_host(io, o);
  REQUIRE(host.ok());
  REQUIRE((*host)->set_anchor(std::vector<float>(9, 4.0f), 3).ok());
  const std::string path = (*host)->options().socket_path;
  std::atomic<bool> go_b{false};
  TrainerLog a, b;
  threads.emplace_back([&] {
    {
      auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
      if (!client.ok()) return void(a.status = client.status());
      for (float& x : (*client)->parameters()) x += 100.0f;
      a.status = (*client)->sync(3, 0, 50, 1.0);  // fragment 0 only
    }
    if (!wait_flag(go_b)) return void(b.status = Status(Err::timeout, "go_b never came"));
    auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
    if (!client.ok()) return void(b.status = client.status());
    record_welcome(**client, b);
    b.status = train(**client, 1, b);
  });
  test::run_on(io, engine_after_partial_round(**host, go_b), 30s);
  host->reset();
  threads.clear();
  REQUIRE(a.status.ok());
  INFO(b.status.to_string());
  REQUIRE(b.status.ok());
  CHECK(b.welcomed == std::vector<float>(9, 4.0f));  // the anchor, not A's half-synced replica
  CHECK(b.next_rounds == std::vector<std::uint64_t>{3, 3});
  CHECK(b.stopped);
}

TEST_CASE("with anchor_view the host welcomes trainers from the engine's own anchor", "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  std::vector<float> anchor(9, 3.0f);
  auto host = host_viewing(io, anchor, 7);
  REQUIRE(host.ok());
  const std::string path = (*host)->options().socket_path;
  std::atomic<bool> a_gone{false};
  TrainerLog a, b;
  threads.emplace_back([&] {
    {
      auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
      if (!client.ok()) return void(a.status = client.status());
      record_welcome(**client, a);
      for (float& x : (*client)->parameters()) x += 1.0f;
      a.status = (*client)->sync(7, 0, 50, 1.0);
    }  // gone before the RESULT
    a_gone = true;
    auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
    if (!client.ok()) return void(b.status = client.status());
    record_welcome(**client, b);
    b.status = train(**client, 1, b);
  });
  test::run_on(io, engine_owning_the_anchor(**host, anchor, a_gone), 30s);
  host->reset();
  threads.clear();
  REQUIRE(a.status.ok());
  CHECK(a.welcomed == std::vector<float>(9, 3.0f));
  INFO(b.status.to_string());
  REQUIRE(b.status.ok());
  CHECK(b.welcomed == std::vector<float>(9, 8.0f));
  CHECK(b.next_rounds == std::vector<std::uint64_t>{8});
  CHECK(b.stopped);
}

namespace {

// Paused while the engine steps its anchor in place: a trainer that comes
// meanwhile is welcomed after, with the stepped anchor, never a half-stepped one.
asio::awaitable<void> engine_stepping_while_paused(TrainerHost& host, std::vector<float>& anchor) {
  host.pause();
  std::function<bool()> hello_in = [&] { return host.snapshot().phase == protocol::Phase::hello_pending; };
  const bool came = co_await eventually(hello_in, 10s);
  REQUIRE(came);
  asio::steady_timer turns(co_await asio::this_coro::executor);
  turns.expires_after(200ms);  // the loop turns; the HELLO waits
  co_await turns.async_wait(asio::use_awaitable);
  CHECK(host.stats().hellos == 0);
  CHECK(host.stats().welcomes == 0);
  REQUIRE(host.set_anchor(anchor, 7).ok());  // which welcomes a waiting trainer, but not while paused
  CHECK(host.stats().welcomes == 0);
  for (float& x : anchor) x = 8.0f;  // the step, on the engine's threads
  host.resume();
  CHECK(host.stats().welcomes == 1);
  auto phase = co_await host.next_phase();
  REQUIRE(phase.ok());
  CHECK(phase->round == 7);
  CHECK(std::vector<float>(phase->replica.begin(), phase->replica.end()) == std::vector<float>(9, 9.0f));
  REQUIRE(host.finish_round(anchor, true).ok());
}

}  // namespace

TEST_CASE("paused, the host answers nothing that reads the anchor; resumed, it welcomes from the anchor then",
          "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  std::vector<float> anchor(9, 3.0f);
  auto host = host_viewing(io, anchor, 7);
  REQUIRE(host.ok());
  const std::string path = (*host)->options().socket_path;
  TrainerLog a;
  threads.emplace_back([&] {
    auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
    if (!client.ok()) return void(a.status = client.status());
    record_welcome(**client, a);
    a.status = train(**client, 1, a);
  });
  test::run_on(io, engine_stepping_while_paused(**host, anchor), 30s);
  host->reset();
  threads.clear();
  INFO(a.status.to_string());
  REQUIRE(a.status.ok());
  CHECK(a.welcomed == std::vector<float>(9, 8.0f));
  CHECK(a.stopped);
}

// --- Streaming DiLoCo: one fragment per round ----------------------------------

namespace {

struct StreamingSync {
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;
  std::vector<float> result;  // the fragment's values after its RESULT
};

// A streaming trainer: keeps its own copy of the parameters, syncs the fragment
// whose next round is the smallest (adding 1 to it first), `syncs` times.
Status train_streaming(protocol::Client& c, int syncs, std::vector<StreamingSync>& log) {
  std::vector<float> own(c.parameters().begin(), c.parameters().end());
  for (int i = 0; i < syncs && !c.stopped(); ++i) {
    std::uint32_t f = 0;
    for (std::uint32_t g = 1; g < c.fragments().size(); ++g)
      if (c.next_round(g) < c.next_round(f)) f = g;
    const auto& d = c.fragments()[f];
    for (std::uint64_t k = d.offset; k < d.offset + d.length; ++k) own[k] += 1.0f;
    auto values = c.fragment_values(f);
    std::copy_n(own.begin() + static_cast<long>(d.offset), d.length, values.begin());
    const std::uint64_t round = c.next_round(f);
    // Odd rounds carry the trainer's timing, even ones do not (a trainer that does not measure it).
    const auto timing = round % 2 == 1 ? std::optional(protocol::SyncTiming{0.25 * round, 0.5 * round}) : std::nullopt;
    GEOLOCO_TRY(c.sync(round, f, 10 + round, 1.0, timing));
    auto result = c.wait_result(20'000);
    if (!result.ok()) return result.status();
    values = c.fragment_values(f);
    std::copy(values.begin(), values.end(), own.begin() + static_cast<long>(d.offset));
    log.push_back({round, f, std::vector<float>(values.begin(), values.end())});
  }
  return {};
}

// The engine's side of one phase: drops round 2 (late), moves the others.
void finish_streaming_phase(TrainerHost& host, const InnerPhase& phase, std::vector<float>& anchor) {
  if (phase.round == 2) {  // the late fragment: dropped, the anchor stays
    REQUIRE(host.finish_round(anchor, false, 3).ok());
    return;
  }
  // The outer step of this test: the fragment moves halfway to the replica.
  for (std::size_t k = 0; k < phase.replica.size(); ++k)
    anchor[phase.offset + k] = 0.5f * (anchor[phase.offset + k] + phase.replica[k]);
  if (phase.round == 1) REQUIRE(host.finish_round(anchor, false, 3).ok());
  else REQUIRE(host.finish_round(anchor, phase.round == 4).ok());
}

// Rounds 1..4 of F = 2 (w [6] is fragment 0, b [3] fragment 1): fragment 1,
// 0, 1, 0. Round 1 is finished with next round 3, as for a late site the
// engine moved ahead: the trainer's SYNC of fragment 0 for round 2 then
// comes back as a phase of round 2, which the engine drops.
asio::awaitable<void> engine_streaming(TrainerHost& host, std::vector<InnerPhase>& phases) {
  std::vector<float> anchor(9, 0.0f);
  REQUIRE(host.set_anchor(anchor, 1).ok());
  for (int i = 0; i < 4; ++i) {
    auto phase = co_await host.next_phase();
    REQUIRE(phase.ok());
    phases.push_back(*phase);
    finish_streaming_phase(host, *phase, anchor);
  }
}

}  // namespace

TEST_CASE("streaming: each round syncs one fragment, and a late fragment comes back as a phase of its round",
          "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  TrainerHostOptions o;
  o.fragments = 2;
  o.streaming = true;
  o.first_round = 1;
  auto host = open_host(io, o);
  REQUIRE(host.ok());
  const std::string path = (*host)->options().socket_path;
  Status status;
  std::vector<std::uint64_t> welcomed_rounds;
  std::vector<StreamingSync> log;
  threads.emplace_back([&] {
    auto c = protocol::Client::connect(path, "job-a", layout(), client_options());
    if (!c.ok()) return void(status = c.status());
    for (std::uint32_t f = 0; f < (*c)->fragments().size(); ++f) welcomed_rounds.push_back((*c)->next_round(f));
    status = train_streaming(**c, 4, log);
  });
  std::vector<InnerPhase> phases;
  test::run_on(io, engine_streaming(**host, phases), 20s);
  host->reset();
  threads.clear();
  INFO(status.to_string());
  REQUIRE(status.ok());
  // Round 1 syncs fragment 1 (b), round 2 fragment 0 (w).
  CHECK(welcomed_rounds == std::vector<std::uint64_t>{2, 1});
  REQUIRE(phases.size() == 4);
  REQUIRE(log.size() == 4);
  const std::vector<std::pair<std::uint64_t, std::uint32_t>> want{{1, 1}, {2, 0}, {3, 1}, {4, 0}};
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("phase " << i);
    CHECK(phases[i].round == want[i].first);
    CHECK(phases[i].fragment == want[i].second);
    CHECK(phases[i].offset == (want[i].second == 0 ? 0u : 6u));
    CHECK(phases[i].replica.size() == (want[i].second == 0 ? 6u : 3u));
    CHECK(phases[i].tokens == 10 + want[i].first);
    if (want[i].first % 2 == 1)
      CHECK(phases[i].timing == protocol::SyncTiming{0.25 * want[i].first, 0.5 * want[i].first});
    else CHECK_FALSE(phases[i].timing.has_value());
    CHECK(log[i].round == want[i].first);
    CHECK(log[i].fragment == want[i].second);
  }
  // b: 0 -> replica 1 -> anchor 0.5; then replica 1.5 -> anchor 1.
  CHECK(log[0].result == std::vector<float>(3, 0.5f));
  CHECK(log[2].result == std::vector<float>(3, 1.0f));
  // w: round 2 was dropped (anchor 0 again, the trainer's +1 is gone), then replica 1 -> 0.5 in round 4.
  CHECK(log[1].result == std::vector<float>(6, 0.0f));
  CHECK(log[3].result == std::vector<float>(6, 0.5f));
}
