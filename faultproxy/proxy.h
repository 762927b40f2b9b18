// geoloco-faultproxy's I/O (docs/faultproxy.md): one listener per link; each
// accepted connection is connected to the link's target and its bytes pumped
// both ways under the faults the Timeline says are in force, with the
// Shaper's timing. Everything runs on one executor (one thread): no locks.
// It counts what it passed (read, written, dropped, held) per link and
// direction, so a test compares its counts with what the daemons say.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"
#include "faultproxy/config.h"
#include "faultproxy/shaper.h"
#include "faultproxy/timeline.h"
#include "common/async_util.h"

namespace geoloco::faultproxy {

struct DirectionStats {
  std::uint64_t read = 0;     ///< bytes read from the sending side
  std::uint64_t written = 0;  ///< bytes written to the receiving side
  std::uint64_t dropped = 0;  ///< bytes a blackhole or a cut discarded
};

struct LinkStats {
  std::uint64_t accepted = 0;           ///< connections accepted
  std::uint64_t refused = 0;            ///< reset at once (refuse, a flap's down window)
  std::uint64_t resets = 0;             ///< connections reset by a reset or a flap
  std::uint64_t cuts = 0;               ///< connections reset by close_after
  std::uint64_t upstream_failures = 0;  ///< the target could not be reached
  DirectionStats up, down;
};

class FaultProxy {
 public:
  using Log = std::function<void(const std::string&)>;
  FaultProxy(asio::any_io_executor executor, ProxyConfig config, Log log);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  /// Binds every link's listener (and the control API) and starts the
  /// schedule's clock. Errors: io naming the address that could not be bound.
  Status start();
  /// Closes the listeners and resets every connection.
  void stop();

  /// Seconds since start().
  double now() const;
  /// The port a link listens on (useful when the file asked for port 0).
  std::uint16_t listen_port(const std::string& link) const;
  std::uint16_t control_port() const;

  /// Counters and the faults in force, per link.
  nlohmann::json stats() const;
  /// One control API request (a JSON object on one line), answered with one
  /// JSON object: {"ok": true, ...} or {"ok": false, "error": "..."}.
  std::string handle_request(std::string_view line);

 private:
  struct Pending {
    std::shared_ptr<std::vector<std::uint8_t>> data;
    Piece piece;
  };
  struct Link;
  struct Conn;
  struct Pump {
    Pump(const asio::any_io_executor& ex, bool is_up, std::uint64_t seed)
        : up(is_up), shaper(seed), reader_wake(ex), writer_wake(ex) {}
    bool up;
    Shaper shaper;
    std::deque<Pending> queue;
    std::size_t queued = 0;      ///< bytes in `queue`
    std::size_t in_flight = 0;   ///< bytes of the piece being written (taken off `queue`)
    bool eof = false;            ///< the sending side finished (or reset: see reset_pending)
    bool reset_pending = false;  ///< the sender reset: reset the receiver once what is queued is written
    bool cut_pending = false;    ///< close_after reached: reset once what is queued is written
    bool done = false;           ///< the receiving side was told (shutdown)
    std::size_t held() const { return queued + in_flight; }
    asio::steady_timer reader_wake, writer_wake;
  };

  asio::awaitable<void> accept_loop(Link& link);
  asio::awaitable<void> serve(Link& link, asio::ip::tcp::socket client);
  asio::awaitable<void> read_side(std::shared_ptr<Conn> conn, bool up);
  asio::awaitable<void> write_side(std::shared_ptr<Conn> conn, bool up);
  asio::awaitable<void> event_loop();
  asio::awaitable<void> control_loop();
  asio::awaitable<void> control_session(asio::ip::tcp::socket socket);
  asio::awaitable<void> sleep_until(asio::steady_timer& timer, double t);

  DirectionFaults faults(const Link& link, bool up, double t) const;
  void apply_events(double from, double to);
  void reset(Conn& conn);
  void finish_if_done(const std::shared_ptr<Conn>& conn);
  void wake(Link& link);
  nlohmann::json link_stats(const Link& link) const;

  asio::any_io_executor executor_;
  ProxyConfig config_;
  Log log_;
  Timeline timeline_;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::unique_ptr<Link>> links_;
  std::unique_ptr<asio::ip::tcp::acceptor> control_;
  asio::steady_timer event_timer_;
  double applied_until_ = 0;
  bool running_ = false;
  std::uint64_t connections_ = 0;  ///< numbers each connection's jitter seed
};

}  // namespace geoloco::faultproxy
