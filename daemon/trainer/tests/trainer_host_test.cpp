// TrainerHost against external trainers: the C++ sync client
// (inner/protocol/client.h) on threads plays the trainer, the test's
// coroutine plays the round engine on the io_context. Values are chosen so
// every expected anchor is exact in fp32.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <vector>

#include "daemon/trainer/tests/run_on.h"
#include "daemon/trainer/trainer_host.h"
#include "inner/protocol/client.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace std::chrono_literals;
namespace protocol = geoloco::inner::protocol;
using geoloco::daemon::test::eventually;

namespace {

std::string socket_path() {
  static int n = 0;
  return "/tmp/geoloco-trainer-host-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".sock";
}

TensorDesc tensor(std::string name, std::vector<std::uint64_t> shape, std::uint64_t offset) {
  TensorDesc t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.offset = offset;
  return t;
}

// w [2, 3] then b [3]: 9 values; two fragments cut at the tensor boundary (6).
Layout layout() { return {tensor("w", {2, 3}, 0), tensor("b", {3}, 6)}; }
// The same sizes with w transposed: a trainer built for another model.
Layout wrong_layout() { return {tensor("w", {3, 2}, 0), tensor("b", {3}, 6)}; }

protocol::ClientOptions client_options() {
  protocol::ClientOptions o;
  o.connect_timeout_ms = 10'000;
  o.welcome_timeout_ms = 20'000;
  return o;
}

std::vector<float> plus(std::span<const float> v, float d) {
  std::vector<float> out(v.begin(), v.end());
  for (float& x : out) x += d;
  return out;
}

// On the engine's io_context: returns once `flag` is set (by a trainer thread).
asio::awaitable<void> until(const std::atomic<bool>& flag) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  while (!flag) {
    t.expires_after(20ms);
    co_await t.async_wait(asio::use_awaitable);
  }
}
bool wait_flag(const std::atomic<bool>& flag) {
  for (int i = 0; i < 2000 && !flag; ++i) std::this_thread::sleep_for(10ms);
  return flag;
}

// One external trainer's view, filled on its thread and checked on the main one.
struct TrainerLog {
  Status status;
  bool anchor_ready = false;
  std::vector<float> welcomed;                 // the segment right after WELCOME (or after INIT's RESULT)
  std::vector<std::uint64_t> next_rounds;      // per fragment, after WELCOME
  std::vector<std::vector<float>> anchors;     // the segment after each round's RESULTs
  bool stopped = false;
};

// Trains `rounds` rounds: adds 1 to every value, syncs every fragment, waits for the RESULTs.
Status train(protocol::Client& c, int rounds, TrainerLog& log) {
  for (int r = 0; r < rounds && !c.stopped(); ++r) {
    for (float& x : c.parameters()) x += 1.0f;
    const auto fragments = static_cast<std::uint32_t>(c.fragments().size());
    for (std::uint32_t f = 0; f < fragments; ++f)
      GEOLOCO_TRY(c.sync(c.next_round(f), f, 100 + f, 2.0 + f));
    for (std::uint32_t f = 0; f < fragments; ++f) {
      auto result = c.wait_result(20'000);
      if (!result.ok()) return result.status();
    }
    log.anchors.emplace_back(c.parameters().begin(), c.parameters().end());
  }
  log.stopped = c.stopped();
  return {};
}

void record_welcome(protocol::Client& c, TrainerLog& log) {
  log.anchor_ready = c.anchor_ready();
  log.welcomed.assign(c.parameters().begin(), c.parameters().end());
  for (std::uint32_t f = 0; f < c.fragments().size(); ++f) log.next_rounds.push_back(c.next_round(f));
}

Result<std::unique_ptr<TrainerHost>> open_host(asio::io_context& io, TrainerHostOptions o) {
  o.socket_path = socket_path();
  o.job = "job-a";
  return TrainerHost::open(io.get_executor(), std::move(o));
}

// --- engines --------------------------------------------------------------

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
    CHECK(phase->tokens == 101);    // the largest fragment's report
    CHECK(phase->loss == 2.5);      // mean of 2.0 and 3.0
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

asio::awaitable<void> engine_refusing_wrong_layout(TrainerHost& host, std::atomic<bool>& go_b, std::atomic<bool>& go_c) {
  // ask_for_initial is off: the first trainer's HELLO waits for the anchor.
  std::function<bool()> hello_waits = [&] { return host.snapshot().phase == protocol::Phase::hello_pending; };
  const bool waits = co_await eventually(hello_waits, 10s);
  REQUIRE(waits);
  CHECK(host.stats().welcomes == 0);
  auto init = co_await host.initial_parameters();
  CHECK(init.status().code() == Err::invalid_argument);
  REQUIRE(host.set_anchor(std::vector<float>(9, 1.0f), 5).ok());  // welcomes the waiting trainer at round 5
  auto phase = co_await host.next_phase();
  REQUIRE(phase.ok());
  CHECK(phase->round == 5);
  CHECK(std::vector<float>(phase->replica.begin(), phase->replica.end()) == std::vector<float>(9, 2.0f));
  std::vector<float> anchor(9, 0.75f);
  REQUIRE(host.finish_round(anchor, false).ok());
  std::function<bool()> a_left = [&] { return host.stats().departures == 1 && !host.trainer_attached(); };
  const bool left = co_await eventually(a_left, 10s);
  REQUIRE(left);

  const protocol::ServerSnapshot before = host.snapshot();
  CHECK(before.layout == layout());  // pinned by the first trainer
  const TrainerHostStats stats = host.stats();
  go_b = true;
  std::function<bool()> b_refused = [&] { return host.stats().refusals == stats.refusals + 1 && !host.trainer_attached(); };
  const bool refused = co_await eventually(b_refused, 10s);
  REQUIRE(refused);
  CHECK(host.snapshot() == before);
  CHECK(host.next_round() == 6);
  CHECK(host.stats().welcomes == stats.welcomes);
  CHECK(host.stats().hellos == stats.hellos);  // refused before it became a HELLO event

  go_c = true;
  auto next = co_await host.next_phase();
  REQUIRE(next.ok());
  CHECK(next->round == 6);
  CHECK(std::vector<float>(next->replica.begin(), next->replica.end()) == std::vector<float>(9, 1.75f));
  REQUIRE(host.finish_round(anchor, true).ok());
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


// The engine owns the anchor (anchor_view): the host reads it only to welcome a trainer.
asio::awaitable<void> engine_owning_the_anchor(TrainerHost& host, std::vector<float>& anchor, std::atomic<bool>& a_gone) {
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

TEST_CASE("an external trainer hands over its initialization and syncs 3 rounds of 2 fragments",
          "[daemon][trainer]") {
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

TEST_CASE("a trainer with the wrong layout is refused and the host's state is unchanged", "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  TrainerHostOptions o;
  o.ask_for_initial = false;
  auto host = open_host(io, o);
  REQUIRE(host.ok());
  const std::string path = (*host)->options().socket_path;
  std::atomic<bool> go_b{false}, go_c{false};
  TrainerLog a, b, c;
  threads.emplace_back([&] {
    {
      auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
      if (!client.ok()) return void(a.status = client.status());
      record_welcome(**client, a);
      a.status = train(**client, 1, a);
    }  // A leaves
    if (!wait_flag(go_b)) return void(b.status = Status(Err::timeout, "go_b never came"));
    auto refused = protocol::Client::connect(path, "job-a", wrong_layout(), client_options());
    b.status = refused.ok() ? Status(Err::internal, "B was welcomed") : refused.status();
    if (!wait_flag(go_c)) return void(c.status = Status(Err::timeout, "go_c never came"));
    auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
    if (!client.ok()) return void(c.status = client.status());
    record_welcome(**client, c);
    c.status = train(**client, 1, c);
  });
  test::run_on(io, engine_refusing_wrong_layout(**host, go_b, go_c), 30s);
  host->reset();
  threads.clear();
  REQUIRE(a.status.ok());
  CHECK(a.anchor_ready);
  CHECK(a.welcomed == std::vector<float>(9, 1.0f));
  CHECK(a.next_rounds == std::vector<std::uint64_t>{5});
  // B hears why, naming the tensor and both shapes.
  CHECK(b.status.code() == Err::mismatch);
  CHECK_THAT(b.status.message(), Catch::Contains("does not match job 'job-a'") && Catch::Contains("'w'"));
  // C resumes where A stopped, from the anchor A's round produced.
  INFO(c.status.to_string());
  REQUIRE(c.status.ok());
  CHECK(c.anchor_ready);
  CHECK(c.welcomed == std::vector<float>(9, 0.75f));
  CHECK(c.next_rounds == std::vector<std::uint64_t>{6});
  CHECK(c.stopped);
}

TEST_CASE("a connection that never completes its HELLO is closed at the deadline; a trainer then attaches",
          "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  TrainerHostOptions o;
  o.hello_timeout_ms = 300;
  auto host = open_host(io, o);
  REQUIRE(host.ok());
  const std::string path = (*host)->options().socket_path;
  std::atomic<bool> done{false};
  Status blocked, half_closed, attached;
  threads.emplace_back([&] {
    auto half = protocol::connect_unix(path, 5000);
    if (!half.ok()) return void(half_closed = half.status());
    const char partial[] = "GLS";  // the start of a header, then nothing
    (void)::send(half->get(), partial, 3, MSG_NOSIGNAL);
    std::this_thread::sleep_for(50ms);
    auto second = protocol::Client::connect(path, "job-a", layout(), client_options());
    blocked = second.ok() ? Status(Err::internal, "a second trainer was welcomed") : second.status();
    // Past the deadline the daemon has sent its ERROR and closed: read to the end.
    char buf[4096];
    std::size_t got = 0;
    for (;;) {
      pollfd p{half->get(), POLLIN, 0};
      if (::poll(&p, 1, 3000) <= 0) return void(half_closed = Status(Err::timeout, "still open after 3 s"));
      const ssize_t n = ::recv(half->get(), buf, sizeof buf, 0);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    half_closed = got > 0 ? Status() : Status(Err::io, "closed without an ERROR");
    auto client = protocol::Client::connect(path, "job-a", layout(), client_options());
    attached = client.ok() ? Status() : client.status();
    done = true;
  });
  test::run_on(io, until(done), 30s);
  const auto refusals = (*host)->stats().refusals;
  host->reset();
  threads.clear();
  CHECK_THAT(blocked.message(), Catch::Contains("already has a trainer attached"));
  INFO(half_closed.to_string());
  CHECK(half_closed.ok());
  INFO(attached.to_string());
  CHECK(attached.ok());
  CHECK(refusals == 2);  // the second trainer while the slot was held, then the missing HELLO
}

TEST_CASE("the job's layout, learnt from a peer's state, refuses a waiting trainer of other shapes",
          "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  TrainerHostOptions o;
  o.ask_for_initial = false;  // a joining site: trainers wait for the state
  auto host = open_host(io, o);
  REQUIRE(host.ok());
  const std::string path = (*host)->options().socket_path;
  std::atomic<bool> refused_done{false}, done{false};
  Status transposed, right;
  threads.emplace_back([&] {
    auto t = protocol::Client::connect(path, "job-a", wrong_layout(), client_options());
    transposed = t.ok() ? Status(Err::internal, "the transposed trainer was welcomed") : t.status();
    refused_done = true;
    auto c = protocol::Client::connect(path, "job-a", layout(), client_options());
    right = c.ok() ? Status() : c.status();
    done = true;
  });
  test::run_on(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor);
    // The transposed trainer's HELLO waits for the anchor (it connects at
    // once); 200 ms later the state's layout arrives.
    t.expires_after(200ms);
    co_await t.async_wait(asio::use_awaitable);
    CHECK((*host)->expect_layout(layout()).ok());
    co_await until(refused_done);
    CHECK((*host)->stats().refusals == 1);
    CHECK((*host)->set_anchor(std::vector<float>(9, 1.0f), 1).ok());
    co_await until(done);
    // A layout other than the one pinned is refused, and changes nothing.
    CHECK((*host)->expect_layout(wrong_layout()).code() == Err::mismatch);
  }(), 30s);
  host->reset();
  threads.clear();
  CHECK(transposed.code() == Err::mismatch);
  CHECK_THAT(transposed.message(), Catch::Contains("tensor 0 ('w'): the job expects shape [2, 3], the trainer sent [3, 2]"));
  INFO(right.to_string());
  CHECK(right.ok());
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

TEST_CASE("TrainerHost::open refuses a bad job", "[daemon][trainer]") {
  asio::io_context io;
  TrainerHostOptions o;
  o.fragments = 0;
  CHECK(open_host(io, o).status().code() == Err::invalid_argument);
  o.fragments = 3;  // more fragments than the 2 tensors
  o.expected_layout = layout();
  auto cut = open_host(io, o);
  CHECK(cut.status().code() == Err::invalid_argument);
  CHECK_THAT(cut.status().message(), Catch::Contains("job-a"));
  TrainerHostOptions first;
  auto host = open_host(io, first);
  REQUIRE(host.ok());
  TrainerHostOptions same;
  same.socket_path = (*host)->options().socket_path;
  same.job = "job-b";
  // A socket served by a live host is not taken over.
  CHECK(TrainerHost::open(io.get_executor(), same).status().code() == Err::io);
}

TEST_CASE("with anchor_view the host welcomes trainers from the engine's own anchor", "[daemon][trainer]") {
  std::vector<std::jthread> threads;
  asio::io_context io;
  std::vector<float> anchor(9, 3.0f);
  TrainerHostOptions o;
  o.anchor_view = [&anchor] { return std::span<const float>(anchor); };
  auto host = open_host(io, o);
  REQUIRE(host.ok());
  REQUIRE((*host)->set_anchor(anchor, 7).ok());
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
    GEOLOCO_TRY(c.sync(round, f, 10 + round, 1.0));
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
