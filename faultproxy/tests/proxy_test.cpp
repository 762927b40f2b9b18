// The proxy on loopback with real sockets: bytes pass intact and counted;
// each fault does what it says (delay, rate cap, slices, partition held then
// released, blackhole, close_after, reset, refuse, a flapping link from the
// schedule); the control API answers every request, bad ones with a reason.
// The times checked are lower bounds the faults impose (a loaded machine is
// only ever slower), with generous upper bounds.
#include <catch2/catch.hpp>
#include <poll.h>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/read_until.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>

#include "faultproxy/proxy.h"

using namespace geoloco;
using namespace geoloco::faultproxy;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTuple = asio::experimental::as_tuple(asio::use_awaitable);

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The target: echoes every connection, counting them and the bytes it got.
class EchoServer {
 public:
  EchoServer() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    asio::co_spawn(io_, accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~EchoServer() {
    asio::post(io_, [this] { io_.stop(); });
    thread_.join();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::atomic<int> accepted{0};
  std::atomic<std::uint64_t> received{0};
  std::atomic<int> eofs{0};  // connections whose client finished (FIN)
  bool echo = true;          // false: read and discard

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto [ec, s] = co_await acceptor_.async_accept(kTuple);
      if (ec) co_return;
      ++accepted;
      asio::co_spawn(io_, serve(std::move(s)), asio::detached);
    }
  }
  asio::awaitable<void> serve(tcp::socket s) {
    std::vector<char> buf(65536);
    for (;;) {
      auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), kTuple);
      if (ec == asio::error::eof) ++eofs;
      if (ec) break;
      received += n;
      if (!echo) continue;
      auto [wec, w] = co_await asio::async_write(s, asio::buffer(buf.data(), n), kTuple);
      if (wec) break;
    }
  }
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
};

// The proxy on its own thread, one link "x" to `target`.
class Running {
 public:
  Running(std::uint16_t target, const std::string& link_faults, const std::string& schedule = "") {
    const std::string text =
        cat("control: 127.0.0.1:0\nlinks:\n  - {name: x, listen: 127.0.0.1:0, connect: 127.0.0.1:", target,
            link_faults.empty() ? "" : ", ", link_faults, "}\n", schedule);
    auto config = parse_config(text, "test.yaml");
    INFO(text << "\n" << config.status().message());
    REQUIRE(config.ok());
    proxy_ = std::make_unique<FaultProxy>(io_.get_executor(), *config, [](const std::string& l) { UNSCOPED_INFO(l); });
    REQUIRE(proxy_->start().ok());
    port_ = proxy_->listen_port("x");
    control_ = proxy_->control_port();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Running() {
    asio::post(io_, [this] {
      proxy_->stop();
      io_.stop();
    });
    thread_.join();
  }
  std::uint16_t port() const { return port_; }

  // One request over the control API, as an operator's script sends it.
  nlohmann::json call(const std::string& request) {
    asio::io_context io;
    tcp::socket s(io);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), control_));
    asio::write(s, asio::buffer(request + "\n"));
    std::string reply;
    const auto n = asio::read_until(s, asio::dynamic_buffer(reply), '\n');
    return nlohmann::json::parse(reply.substr(0, n));
  }
  nlohmann::json set(const std::string& request) {
    auto reply = call(request);
    INFO(reply.dump());
    REQUIRE(reply["ok"] == true);
    return reply;
  }
  nlohmann::json link_stats() { return call(R"({"command":"stats"})")["links"]["x"]; }

 private:
  asio::io_context io_;
  std::unique_ptr<FaultProxy> proxy_;
  std::uint16_t port_ = 0, control_ = 0;
  std::thread thread_;
};

// A client of the proxy, blocking, with reads bounded in time.
class Client {
 public:
  explicit Client(std::uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    socket_.set_option(tcp::no_delay(true));
  }
  void send(const std::vector<char>& bytes) { asio::write(socket_, asio::buffer(bytes)); }
  std::error_code try_send(const std::vector<char>& bytes) {
    std::error_code ec;
    asio::write(socket_, asio::buffer(bytes), ec);
    return ec;
  }
  // Reads until `n` bytes came, the peer closed, or `seconds` passed.
  std::vector<char> read(std::size_t n, double seconds, std::error_code* error = nullptr) {
    std::vector<char> out;
    const auto t0 = Clock::now();
    while (out.size() < n) {
      const double left = seconds - since(t0);
      if (left <= 0) break;
      pollfd p{socket_.native_handle(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) continue;
      char buf[65536];
      std::error_code ec;
      const std::size_t got = socket_.read_some(asio::buffer(buf, std::min(sizeof buf, n - out.size())), ec);
      if (ec) {
        if (error) *error = ec;
        break;
      }
      out.insert(out.end(), buf, buf + got);
    }
    return out;
  }
  void shutdown_send() { socket_.shutdown(tcp::socket::shutdown_send); }

 private:
  asio::io_context io_;
  tcp::socket socket_;
};

std::vector<char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (auto& c : v) c = static_cast<char>(rng());
  return v;
}

// Waits (bounded) until `ok` holds.
template <class F>
bool eventually(F ok, double seconds = 5) {
  const auto t0 = Clock::now();
  while (since(t0) < seconds) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ok();
}

// Checks that `ok` keeps holding for `seconds` (what must not happen, given
// a while to happen). A loaded machine can only make it miss a fault here,
// never fail a proxy that behaves: the waits on what must happen are
// eventually()'s.
template <class F>
bool holds_for(F ok, double seconds) {
  const auto t0 = Clock::now();
  while (since(t0) < seconds) {
    if (!ok()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ok();
}

// Every byte read is written, dropped, or still held.
void check_ledger(const nlohmann::json& s) {
  for (const char* d : {"up", "down"}) {
    INFO(d << ": " << s[d].dump());
    CHECK(s[d]["read"].get<std::uint64_t>() == s[d]["written"].get<std::uint64_t>() +
                                                   s[d]["dropped"].get<std::uint64_t>() +
                                                   s[d]["held"].get<std::uint64_t>());
  }
}

}  // namespace

TEST_CASE("without faults, bytes pass intact both ways and are counted") {
  EchoServer target;
  Running proxy(target.port(), "");
  Client c(proxy.port());
  const auto data = random_bytes(1 << 20, 1);
  c.send(data);
  CHECK(c.read(data.size(), 20) == data);
  c.shutdown_send();
  std::error_code ec;
  CHECK(c.read(1, 5, &ec).empty());  // the echo server's close came through
  CHECK(ec == asio::error::eof);
  const auto s = proxy.link_stats();
  CHECK(s["accepted"] == 1);
  CHECK(s["up"]["read"] == data.size());
  CHECK(s["up"]["written"] == data.size());
  CHECK(s["down"]["written"] == data.size());
  CHECK(s["up"]["dropped"] == 0);
  CHECK(eventually([&] { return proxy.link_stats()["open"] == 0; }));
}

TEST_CASE("latency delays each direction; a rate cap paces the sender") {
  EchoServer target;
  SECTION("latency: an echo takes at least the two one-way delays") {
    Running proxy(target.port(), "both: {latency: 100ms, jitter: 10ms}");
    Client c(proxy.port());
    const auto data = random_bytes(10, 2);
    const auto t0 = Clock::now();
    c.send(data);
    CHECK(c.read(data.size(), 5) == data);
    const double rtt = since(t0);
    CHECK(rtt >= 0.18);
    CHECK(rtt < 2.0);
  }
  SECTION("rate: 300 kB up a 1 MB/s link takes at least 0.29 s; the way back is not capped") {
    Running proxy(target.port(), "up: {rate: 8M}");
    Client c(proxy.port());
    const auto data = random_bytes(300000, 3);
    const auto t0 = Clock::now();
    c.send(data);
    CHECK(c.read(data.size(), 10) == data);
    const double took = since(t0);
    CHECK(took >= 0.29);
    CHECK(took < 5.0);
  }
  SECTION("slices: 1000 bytes in 100-byte pieces 10 ms apart take at least 90 ms, intact") {
    Running proxy(target.port(), "up: {slice: 100, slice_delay: 10ms}");
    Client c(proxy.port());
    const auto data = random_bytes(1000, 4);
    const auto t0 = Clock::now();
    c.send(data);
    CHECK(c.read(data.size(), 5) == data);
    CHECK(since(t0) >= 0.09);
  }
}

TEST_CASE("a partition holds the bytes and new connections until it ends") {
  EchoServer target;
  Running proxy(target.port(), "");
  Client c(proxy.port());
  const auto first = random_bytes(100, 5);
  c.send(first);
  REQUIRE(c.read(first.size(), 5) == first);
  proxy.set(R"({"command":"set","link":"x","both":{"partition":true}})");
  const auto held = random_bytes(5000, 6);
  c.send(held);
  CHECK(c.read(1, 0.5).empty());
  Client late(proxy.port());  // accepted by the proxy, not passed to the target
  CHECK(eventually([&] {      // it holds the new connection and every byte
    const auto now = proxy.link_stats();
    return now["pending"] == 1 && now["up"]["held"] == held.size();
  }));
  CHECK(holds_for([&] { return target.accepted == 1; }, 0.2));
  CHECK(target.received == first.size());
  const auto s = proxy.link_stats();
  CHECK(s["up"]["held"] == held.size());
  CHECK(s["faults"] == "up.partition down.partition");
  proxy.set(R"({"command":"clear","link":"x"})");
  CHECK(c.read(held.size(), 5) == held);  // nothing lost, in order
  CHECK(eventually([&] { return target.accepted == 2; }));
  const auto later = random_bytes(10, 7);
  late.send(later);
  CHECK(late.read(later.size(), 5) == later);
}

TEST_CASE("a blackhole drops the bytes silently and counts them") {
  EchoServer target;
  Running proxy(target.port(), "");
  Client c(proxy.port());
  proxy.set(R"({"command":"set","link":"x","up":{"blackhole":true}})");
  c.send(random_bytes(1000, 8));
  CHECK(c.read(1, 0.5).empty());
  const auto s = proxy.link_stats();
  CHECK(s["up"]["read"] == 1000);
  CHECK(s["up"]["dropped"] == 1000);
  CHECK(s["up"]["written"] == 0);
  CHECK(target.received == 0);
  CHECK(s["open"] == 1);  // the connection looks alive
}

TEST_CASE("close_after passes exactly N bytes, then resets both sides") {
  EchoServer target;
  target.echo = false;
  Running proxy(target.port(), "up: {close_after: 1000}");
  Client c(proxy.port());
  c.send(random_bytes(5000, 9));
  std::error_code ec;
  CHECK(c.read(1, 5, &ec).empty());
  CHECK(ec == asio::error::connection_reset);
  CHECK(eventually([&] { return target.received == 1000; }));
  // Closed on both sides, the proxy wrote its last byte: the ledger below
  // (1000 written) says no byte can follow.
  CHECK(eventually([&] { return proxy.link_stats()["open"] == 0; }));
  CHECK(target.received == 1000);
  const auto s = proxy.link_stats();
  CHECK(s["cuts"] == 1);
  CHECK(s["up"]["written"] == 1000);
  CHECK(s["open"] == 0);
  check_ledger(s);
}

TEST_CASE("reset and refuse on request") {
  EchoServer target;
  Running proxy(target.port(), "");
  Client c(proxy.port());
  c.send(random_bytes(10, 10));
  REQUIRE(c.read(10, 5).size() == 10);
  proxy.set(R"({"command":"reset","link":"x"})");
  std::error_code ec;
  CHECK(c.read(1, 5, &ec).empty());
  CHECK(ec == asio::error::connection_reset);
  proxy.set(R"({"command":"set","link":"*","refuse":true})");
  Client refused(proxy.port());
  ec = {};
  CHECK(refused.read(1, 5, &ec).empty());
  CHECK(ec == asio::error::connection_reset);
  const auto s = proxy.link_stats();
  CHECK(s["resets"] == 1);
  CHECK(s["refused"] == 1);
  CHECK(target.accepted == 1);
  check_ledger(s);
}

TEST_CASE("a partition holds a close too, and a connection it holds is reset with the link") {
  EchoServer target;
  Running proxy(target.port(), "");
  Client c(proxy.port());
  c.send(random_bytes(10, 20));
  REQUIRE(c.read(10, 5).size() == 10);
  proxy.set(R"({"command":"set","link":"x","both":{"partition":true}})");
  const auto held = random_bytes(3000, 21);
  c.send(held);
  c.shutdown_send();  // the FIN waits behind the held bytes
  Client pending(proxy.port());
  // Held: the bytes read (the FIN after them) and the new connection.
  CHECK(eventually([&] {
    const auto now = proxy.link_stats();
    return now["pending"] == 1 && now["up"]["held"] == held.size() && now["up"]["closes_held"] == 1;
  }));
  CHECK(holds_for([&] { return target.eofs == 0; }, 0.2));
  auto s = proxy.link_stats();
  CHECK(s["pending"] == 1);
  check_ledger(s);
  // A reset takes the held connection too; the established one as well.
  proxy.set(R"({"command":"reset","link":"x"})");
  std::error_code ec;
  CHECK(pending.read(1, 5, &ec).empty());
  CHECK(ec == asio::error::connection_reset);
  s = proxy.link_stats();
  CHECK(s["pending"] == 0);
  CHECK(s["resets"] == 2);
  CHECK(s["up"]["dropped"] == held.size());  // lost with the reset, counted
  check_ledger(s);
  CHECK(target.accepted == 1);  // the held one never reached the target
}

TEST_CASE("a partition delays a close until it ends") {
  EchoServer target;
  Running proxy(target.port(), "");
  Client c(proxy.port());
  const auto data = random_bytes(2000, 22);
  c.send(data);
  REQUIRE(c.read(data.size(), 5) == data);
  proxy.set(R"({"command":"set","link":"x","up":{"partition":true}})");
  c.send(data);
  c.shutdown_send();
  CHECK(eventually([&] {
    const auto now = proxy.link_stats();
    return now["up"]["held"] == data.size() && now["up"]["closes_held"] == 1;
  }));
  CHECK(holds_for([&] { return target.eofs == 0 && target.received == data.size(); }, 0.2));
  CHECK(target.received == data.size());
  proxy.set(R"({"command":"clear","link":"x"})");
  CHECK(eventually([&] { return target.eofs == 1; }));
  CHECK(target.received == 2 * data.size());
  CHECK(c.read(data.size(), 5) == data);
  check_ledger(proxy.link_stats());
}

TEST_CASE("a flapping link from the schedule: reset at the window's start, refused in it, open after") {
  EchoServer target;
  Running proxy(target.port(), "", "schedule:\n  - {at: 0.5s, link: x, flap: {period: 60s, down: 3s}}\n");
  Client c(proxy.port());  // before the window
  c.send(random_bytes(10, 11));
  REQUIRE(c.read(10, 5).size() == 10);
  std::error_code ec;
  CHECK(c.read(1, 5, &ec).empty());  // reset at 0.5 s
  CHECK(ec == asio::error::connection_reset);
  Client during(proxy.port());
  ec = {};
  CHECK(during.read(1, 5, &ec).empty());
  CHECK(ec == asio::error::connection_reset);
  // Tried again until a connection goes through, not slept past the window:
  // every try in it is refused, the first after it (3.5 s on the proxy's
  // clock) echoes.
  std::uint64_t refused = 1;
  const auto data = random_bytes(10, 12);
  for (;;) {
    Client next(proxy.port());
    ec = next.try_send(data);
    const auto echoed = ec ? std::vector<char>() : next.read(data.size(), 5, &ec);
    if (echoed == data) break;
    INFO(ec.message());
    REQUIRE((ec == asio::error::connection_reset || ec == asio::error::broken_pipe));
    ++refused;
    REQUIRE(refused < 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(proxy.call(R"({"command":"stats"})")["t"].get<double>() >= 3.5);  // open only after the window
  const auto s = proxy.link_stats();
  CHECK(s["resets"] == 1);
  CHECK(s["refused"] == refused);
}

TEST_CASE("the control API answers every request, a bad one with the reason") {
  EchoServer target;
  Running proxy(target.port(), "");
  auto error = [&](const std::string& request) {
    auto reply = proxy.call(request);
    INFO(request << " -> " << reply.dump());
    CHECK(reply["ok"] == false);
    return reply.value("error", std::string());
  };
  CHECK_THAT(error("{"), Catch::Contains("request"));
  CHECK_THAT(error("[1,2]"), Catch::Contains("expected a JSON object with \"command\""));
  CHECK_THAT(error(R"({"command":42})"), Catch::Contains("unknown command '42'"));
  CHECK_THAT(error(R"({"command":"frobnicate"})"), Catch::Contains("expected stats, set, clear or reset"));
  CHECK_THAT(error(R"({"command":"set"})"), Catch::Contains("expected \"link\""));
  CHECK_THAT(error(R"({"command":"set","link":"y","refuse":true})"),
             Catch::Contains("no link 'y' (the links: x, or *)"));
  CHECK_THAT(error(R"({"command":"set","link":"x"})"), Catch::Contains("changes nothing"));
  CHECK_THAT(error(R"({"command":"set","link":"x","up":{"latency":"soon"}})"),
             Catch::Contains("up.latency: expected a duration"));
  CHECK_THAT(error(R"({"command":"reset","link":"x","up":{}})"), Catch::Contains("takes only \"link\""));
  const auto ok = proxy.call(R"({"command":"stats"})");
  CHECK(ok["ok"] == true);
  CHECK(ok["links"]["x"]["faults"] == "none");
  proxy.set(R"({"command":"set","link":"x","both":{"latency":"30ms"}})");
  CHECK(proxy.link_stats()["faults"] == "up.latency=30ms down.latency=30ms");
}
