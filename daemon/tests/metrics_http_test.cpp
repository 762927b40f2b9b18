#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>
#include <thread>

#include "daemon/metrics.h"
#include "daemon/metrics_http.h"

using namespace geoloco;
using namespace geoloco::daemon;

namespace {
std::string fetch(std::uint16_t port, const std::string& request) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(s, asio::buffer(request));
  std::string out;
  std::error_code ec;
  char buf[4096];
  for (;;) {
    const std::size_t n = s.read_some(asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}
}  // namespace

TEST_CASE("GET /metrics answers the registry in Prometheus text; other requests are refused") {
  Metrics m;
  REQUIRE(m.declare("geoloco_rounds_total", Metrics::Type::counter, "Rounds committed.").ok());
  REQUIRE(m.add("geoloco_rounds_total", {{"job", "demo"}}, 7).ok());
  asio::io_context io;
  auto server = MetricsHttpServer::open(io.get_executor(), "127.0.0.1", 0, [&] { return m.render(); });
  REQUIRE(server.ok());
  const auto port = (*server)->port();
  std::thread loop([&] { io.run_for(std::chrono::seconds(10)); });

  const std::string ok = fetch(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.find("geoloco_rounds_total{job=\"demo\"} 7\n") != std::string::npos);
  CHECK(fetch(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(fetch(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
  CHECK(fetch(port, "GET /metrics HTTP/1.1\r\n" + std::string(9000, 'x')).rfind("HTTP/1.1 431", 0) == 0);

  io.stop();
  loop.join();
}

TEST_CASE("a metrics address that cannot be used is refused with the reason") {
  asio::io_context io;
  auto bad = MetricsHttpServer::open(io.get_executor(), "not-an-ip", 0, [] { return std::string(); });
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("metrics address 'not-an-ip'") == 0);
}
