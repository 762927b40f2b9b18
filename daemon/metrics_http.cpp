#include "daemon/metrics_http.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "common/accept_loop.h"

namespace geoloco::daemon {

namespace {
using asio::use_awaitable;
using asio::experimental::as_tuple;
constexpr std::size_t kMaxRequestBytes = 8192;

std::string response(const std::string& status, const std::string& type, const std::string& body) {
  return cat("HTTP/1.1 ", status, "\r\nContent-Type: ", type, "\r\nContent-Length: ", body.size(),
             "\r\nConnection: close\r\n\r\n", body);
}
}  // namespace

MetricsHttpServer::MetricsHttpServer(asio::any_io_executor executor, std::function<std::string()> render)
    : acceptor_(executor), render_(std::move(render)) {}

MetricsHttpServer::~MetricsHttpServer() { close(); }

void MetricsHttpServer::close() {
  if (!open_) return;
  open_ = false;
  std::error_code ignored;
  acceptor_.close(ignored);
}

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::open(asio::any_io_executor executor,
                                                                   const std::string& host, std::uint16_t port,
                                                                   std::function<std::string()> render) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(executor, std::move(render)));
  std::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  GEOLOCO_RETURN_IF(ec, Err::invalid_argument, "metrics address '", host, "': ", ec.message());
  asio::ip::tcp::endpoint endpoint(address, port);
  s->acceptor_.open(endpoint.protocol(), ec);
  if (!ec) s->acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) s->acceptor_.bind(endpoint, ec);
  if (!ec) s->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot serve metrics on ", host, ":", port, ": ", ec.message());
  s->port_ = s->acceptor_.local_endpoint().port();
  asio::co_spawn(executor, s->accept_loop(), asio::detached);
  return s;
}

asio::awaitable<void> MetricsHttpServer::accept_loop() {
  return accept_until_closed(acceptor_, open_, accept_errors_,
                             [this](asio::ip::tcp::socket socket) { return serve(std::move(socket)); });
}

asio::awaitable<void> MetricsHttpServer::serve(asio::ip::tcp::socket socket) {
  // A scraper that sends nothing is cut off after 5 s.
  asio::steady_timer deadline(socket.get_executor(), std::chrono::seconds(5));
  deadline.async_wait([&socket](std::error_code ec) {
    if (!ec) socket.close();
  });
  asio::streambuf buffer(kMaxRequestBytes);
  auto [ec, n] = co_await asio::async_read_until(socket, buffer, "\r\n\r\n", as_tuple(use_awaitable));
  deadline.cancel();
  if (ec && ec != asio::error::not_found) co_return;
  const std::string head(asio::buffers_begin(buffer.data()), asio::buffers_end(buffer.data()));
  std::string reply;
  if (ec == asio::error::not_found)
    reply = response("431 Request Header Fields Too Large", "text/plain", "too large\n");
  else if (head.rfind("GET /metrics ", 0) == 0) reply = response("200 OK", "text/plain; version=0.0.4", render_());
  else if (head.rfind("GET ", 0) == 0) reply = response("404 Not Found", "text/plain", "try /metrics\n");
  else reply = response("405 Method Not Allowed", "text/plain", "GET only\n");
  co_await asio::async_write(socket, asio::buffer(reply), as_tuple(use_awaitable));
  std::error_code ignored;
  socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
}

}  // namespace geoloco::daemon
