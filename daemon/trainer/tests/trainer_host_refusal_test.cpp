// TrainerHost refusing what it must not take: a trainer of the wrong
// layout (by count or by shapes learnt from a peer's state), a connection
// that never completes its HELLO, a bad job. The host's state is unchanged
// each time and the right trainer attaches after.
#include "daemon/trainer/tests/trainer_host_fixture.h"

using namespace geoloco::daemon::test;

namespace {

asio::awaitable<void> engine_refusing_wrong_layout(TrainerHost& host, std::atomic<bool>& go_b,
                                                   std::atomic<bool>& go_c) {
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
  std::function<bool()> b_refused = [&] {
    return host.stats().refusals == stats.refusals + 1 && !host.trainer_attached();
  };
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

}  // namespace

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
  test::run_on(
      io,
      [&]() -> asio::awaitable<void> {
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
      }(),
      30s);
  host->reset();
  threads.clear();
  CHECK(transposed.code() == Err::mismatch);
  CHECK_THAT(transposed.message(),
             Catch::Contains("tensor 0 ('w'): the job expects shape [2, 3], the trainer sent [3, 2]"));
  INFO(right.to_string());
  CHECK(right.ok());
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
