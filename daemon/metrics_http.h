// The site's Prometheus endpoint: GET /metrics on the site file's `metrics`
// address answers the registry's text (metrics.h); anything else is 404.
// Deliberately tiny: one request per connection, bounded request size and
// time, no keep-alive. Meant for a local scraper, so it listens on loopback
// by default.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <functional>
#include <memory>
#include <string>

#include <atomic>

#include "common/status.h"

namespace geoloco::daemon {

class MetricsHttpServer {
 public:
  /// `render` produces the body on each scrape (on the executor's thread).
  /// Errors: io (cannot listen).
  static Result<std::unique_ptr<MetricsHttpServer>> open(asio::any_io_executor executor, const std::string& host,
                                                         std::uint16_t port, std::function<std::string()> render);
  ~MetricsHttpServer();
  std::uint16_t port() const { return port_; }
  void close();
  /// accept() failures so far (EMFILE, ENOMEM: each retried after accept_backoff()).
  std::uint64_t accept_errors() const { return accept_errors_; }

 private:
  MetricsHttpServer(asio::any_io_executor executor, std::function<std::string()> render);
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve(asio::ip::tcp::socket socket);

  asio::ip::tcp::acceptor acceptor_;
  std::function<std::string()> render_;
  std::uint16_t port_ = 0;
  bool open_ = true;
  std::atomic<std::uint64_t> accept_errors_{0};
};

}  // namespace geoloco::daemon
