#include "faultproxy/proxy.h"

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cmath>

#include "common/mix.h"

namespace geoloco::faultproxy {

namespace {
using asio::ip::tcp;
constexpr auto kTuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::size_t kReadBytes = 64 * 1024;

// Closes with a reset (RST), as a failing link or middlebox would, not a FIN.
void abort_socket(tcp::socket& s) {
  std::error_code ec;
  s.set_option(asio::socket_base::linger(true, 0), ec);
  s.close(ec);
}
}  // namespace

struct FaultProxy::Link {
  Link(const asio::any_io_executor& ex, LinkConfig c) : config(std::move(c)), acceptor(ex), changed(ex) {}
  LinkConfig config;
  tcp::acceptor acceptor;
  tcp::endpoint target;
  LinkStats stats;
  LinkClock clock_up, clock_down;
  std::set<std::shared_ptr<Conn>> conns;    ///< connected to the target, pumping
  std::set<std::shared_ptr<Conn>> pending;  ///< accepted, held by a partition or still connecting
  Signal changed;                           ///< for connections held by a partition before they reach the target
};

struct FaultProxy::Conn {
  Conn(const asio::any_io_executor& ex, Link& l, tcp::socket c, std::uint64_t seed)
      : link(l), client(std::move(c)), server(ex), up(ex, true, mix64(seed)), down(ex, false, mix64(seed + 1)) {}
  Link& link;
  tcp::socket client, server;
  Pump up, down;
  bool closed = false;
  Pump& pump(bool u) { return u ? up : down; }
  tcp::socket& from(bool u) { return u ? client : server; }
  tcp::socket& to(bool u) { return u ? server : client; }
};

FaultProxy::FaultProxy(asio::any_io_executor executor, ProxyConfig config, Log log)
    : executor_(std::move(executor)),
      config_(std::move(config)),
      log_(std::move(log)),
      timeline_(
          [&] {
            std::map<std::string, LinkFaults> base;
            for (const auto& l : config_.links) base[l.name] = l.faults;
            return base;
          }(),
          config_.schedule),
      start_(std::chrono::steady_clock::now()),
      event_timer_(executor_) {
  for (const auto& l : config_.links) links_.push_back(std::make_unique<Link>(executor_, l));
}

FaultProxy::~FaultProxy() = default;

double FaultProxy::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Status FaultProxy::start() {
  tcp::resolver resolver(executor_);
  auto bind = [&](tcp::acceptor& acceptor, const HostPort& at, const std::string& what) -> Status {
    std::error_code ec;
    auto found = resolver.resolve(at.host, std::to_string(at.port), ec);
    GEOLOCO_RETURN_IF(ec || found.empty(), Err::io, what, ": cannot resolve ", at.host, ": ", ec.message());
    const tcp::endpoint ep = *found.begin();
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    GEOLOCO_RETURN_IF(ec, Err::io, what, ": cannot listen on ", at.host, ":", at.port, ": ", ec.message());
    return {};
  };
  for (auto& link : links_) {
    GEOLOCO_TRY(bind(link->acceptor, link->config.listen, cat("link ", link->config.name)));
    std::error_code ec;
    auto found = resolver.resolve(link->config.connect.host, std::to_string(link->config.connect.port), ec);
    GEOLOCO_RETURN_IF(ec || found.empty(), Err::io, "link ", link->config.name, ": cannot resolve ",
                      link->config.connect.host, ": ", ec.message());
    link->target = *found.begin();
  }
  if (config_.control) {
    control_ = std::make_unique<tcp::acceptor>(executor_);
    GEOLOCO_TRY(bind(*control_, *config_.control, "control"));
  }
  start_ = std::chrono::steady_clock::now();
  applied_until_ = -1;
  running_ = true;
  for (auto& link : links_) asio::co_spawn(executor_, accept_loop(*link), asio::detached);
  if (control_) asio::co_spawn(executor_, control_loop(), asio::detached);
  asio::co_spawn(executor_, event_loop(), asio::detached);
  return {};
}

void FaultProxy::stop() {
  if (!running_) return;
  running_ = false;
  std::error_code ec;
  for (auto& link : links_) {
    link->acceptor.close(ec);
    for (auto conn : std::set<std::shared_ptr<Conn>>(link->conns)) reset(*conn);
    for (auto conn : std::set<std::shared_ptr<Conn>>(link->pending)) reset(*conn);
    link->changed.notify_all();
  }
  if (control_) control_->close(ec);
  event_timer_.cancel();
}

std::uint16_t FaultProxy::listen_port(const std::string& name) const {
  for (const auto& link : links_)
    if (link->config.name == name) {
      std::error_code ec;
      return link->acceptor.local_endpoint(ec).port();
    }
  return 0;
}

std::uint16_t FaultProxy::control_port() const {
  std::error_code ec;
  return control_ ? control_->local_endpoint(ec).port() : 0;
}

DirectionFaults FaultProxy::faults(const Link& link, bool up, double t) const {
  const LinkFaults f = timeline_.state(link.config.name, t);
  return up ? f.up : f.down;
}

asio::awaitable<void> FaultProxy::sleep_until(asio::steady_timer& timer, double t) {
  if (std::isinf(t)) {
    timer.expires_at(asio::steady_timer::time_point::max());
  } else {
    timer.expires_at(start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(std::max(t, 0.0))));
  }
  co_await timer.async_wait(kTuple);
}

void FaultProxy::wake(Link& link) {
  link.changed.notify_all();
  for (const auto& conn : link.conns)
    for (Pump* p : {&conn->up, &conn->down}) {
      p->reader_wake.cancel();
      p->writer_wake.cancel();
    }
}

void FaultProxy::reset(Conn& conn) {
  if (conn.closed) return;
  conn.closed = true;
  abort_socket(conn.client);
  abort_socket(conn.server);
  for (Pump* p : {&conn.up, &conn.down}) {
    // What was waiting to be written is lost with the connection: counted so
    // that read = written + dropped + held always holds.
    (p->up ? conn.link.stats.up : conn.link.stats.down).dropped += p->queued;
    p->queue.clear();
    p->queued = 0;
    p->reader_wake.cancel();
    p->writer_wake.cancel();
  }
  for (auto* set : {&conn.link.conns, &conn.link.pending})
    for (auto it = set->begin(); it != set->end(); ++it)
      if (it->get() == &conn) {
        set->erase(it);
        break;
      }
}

void FaultProxy::finish_if_done(const std::shared_ptr<Conn>& conn) {
  if (conn->closed || !conn->up.done || !conn->down.done) return;
  conn->closed = true;
  std::error_code ec;
  conn->client.close(ec);
  conn->server.close(ec);
  conn->link.conns.erase(conn);
}

void FaultProxy::apply_events(double from, double to) {
  if (!(to > from)) return;
  for (const TimedChange* c : timeline_.changes_between(from, to))
    log_(cat("t=", to, "s ", c->link, ": ", c->change.text.empty() ? "(no change)" : c->change.text));
  for (auto& link : links_) {
    const int resets = timeline_.resets_between(link->config.name, from, to);
    if (resets > 0 && link->conns.size() + link->pending.size() > 0) {
      log_(cat("t=", to, "s ", link->config.name, ": reset ", link->conns.size() + link->pending.size(),
               " connection(s)"));
      for (auto* set : {&link->conns, &link->pending})
        for (auto conn : std::set<std::shared_ptr<Conn>>(*set)) {
          ++link->stats.resets;
          reset(*conn);
        }
    }
    wake(*link);
  }
  applied_until_ = to;
}

asio::awaitable<void> FaultProxy::event_loop() {
  while (running_) {
    co_await sleep_until(event_timer_, timeline_.next_event_after(applied_until_));
    if (!running_) break;
    apply_events(applied_until_, now());
  }
}

asio::awaitable<void> FaultProxy::accept_loop(Link& link) {
  while (running_) {
    auto [ec, socket] = co_await link.acceptor.async_accept(kTuple);
    if (!running_) break;
    if (ec) {
      // Out of descriptors: wait a little rather than spin.
      asio::steady_timer pause(executor_, std::chrono::milliseconds(50));
      co_await pause.async_wait(kTuple);
      continue;
    }
    asio::co_spawn(executor_, serve(link, std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> FaultProxy::serve(Link& link, tcp::socket client) {
  ++link.stats.accepted;
  if (timeline_.refusing(link.config.name, now())) {
    ++link.stats.refused;
    abort_socket(client);
    co_return;
  }
  auto conn = std::make_shared<Conn>(executor_, link, std::move(client), config_.seed * 0x10001 + ++connections_);
  // Until it reaches the target a connection is pending: resets and flaps
  // take it too, and a partition holds it (the target is not reached until
  // the partition ends).
  link.pending.insert(conn);
  while (running_ && !conn->closed && (faults(link, true, now()).partition || faults(link, false, now()).partition))
    co_await link.changed.wait();
  if (!running_ || conn->closed) {
    reset(*conn);
    co_return;
  }
  if (timeline_.refusing(link.config.name, now())) {  // the partition ended inside a refusal
    ++link.stats.refused;
    reset(*conn);
    co_return;
  }
  auto [ec] = co_await conn->server.async_connect(link.target, kTuple);
  if (conn->closed) co_return;  // reset while connecting
  if (ec || !running_) {
    ++link.stats.upstream_failures;
    if (running_) log_(cat("t=", now(), "s ", link.config.name, ": cannot reach the target: ", ec.message()));
    reset(*conn);
    co_return;
  }
  std::error_code ignored;
  conn->client.set_option(tcp::no_delay(true), ignored);
  conn->server.set_option(tcp::no_delay(true), ignored);
  link.pending.erase(conn);
  link.conns.insert(conn);
  for (bool up : {true, false}) {
    asio::co_spawn(executor_, read_side(conn, up), asio::detached);
    asio::co_spawn(executor_, write_side(conn, up), asio::detached);
  }
}

asio::awaitable<void> FaultProxy::read_side(std::shared_ptr<Conn> conn, bool up) {
  Link& link = conn->link;
  Pump& pump = conn->pump(up);
  LinkClock& clock = up ? link.clock_up : link.clock_down;
  DirectionStats& stats = up ? link.stats.up : link.stats.down;
  while (!conn->closed) {
    double t = now();
    if (pump.held() >= config_.window_bytes) {
      co_await sleep_until(pump.reader_wake, INFINITY);
      continue;
    }
    if (const double ready = Shaper::read_ready_at(faults(link, up, t), clock, t); ready > t) {
      co_await sleep_until(pump.reader_wake, ready);
      continue;
    }
    auto data = std::make_shared<std::vector<std::uint8_t>>(kReadBytes);
    auto [ec, n] = co_await conn->from(up).async_read_some(asio::buffer(*data), kTuple);
    stats.read += n;
    if (conn->closed) {
      stats.dropped += n;
      break;
    }
    if (ec) {
      // The sender finished (FIN) or reset (RST): either travels on after
      // what is queued, and not through a partition.
      pump.eof = true;
      pump.reset_pending = ec != asio::error::eof;
      pump.writer_wake.cancel();
      break;
    }
    data->resize(n);
    t = now();
    ShapedRead shaped = pump.shaper.shape(faults(link, up, t), t, n, clock);
    stats.dropped += shaped.dropped;
    for (const Piece& piece : shaped.pieces) {
      pump.queue.push_back(Pending{data, piece});
      pump.queued += piece.length;
    }
    pump.writer_wake.cancel();
    if (shaped.cut) {
      pump.cut_pending = true;  // the writer resets once the last allowed byte is written
      break;                    // nothing after the cut is read
    }
  }
}

asio::awaitable<void> FaultProxy::write_side(std::shared_ptr<Conn> conn, bool up) {
  Link& link = conn->link;
  Pump& pump = conn->pump(up);
  DirectionStats& stats = up ? link.stats.up : link.stats.down;
  while (!conn->closed) {
    const double t = now();
    // A partition holds everything: queued bytes, and a close or reset
    // behind them. The event loop wakes us when it ends.
    if (faults(link, up, t).partition) {
      co_await sleep_until(pump.writer_wake, INFINITY);
      continue;
    }
    if (pump.queue.empty()) {
      if (pump.cut_pending) {
        ++link.stats.cuts;
        log_(cat("t=", now(), "s ", link.config.name, ": connection reset after ", pump.shaper.passed(), " bytes ",
                 up ? "up" : "down", " (close_after)"));
        reset(*conn);
        break;
      }
      if (pump.eof) {
        if (pump.reset_pending) {
          reset(*conn);  // the sender's reset
          break;
        }
        std::error_code ec;
        conn->to(up).shutdown(tcp::socket::shutdown_send, ec);
        pump.done = true;
        finish_if_done(conn);
        break;
      }
      co_await sleep_until(pump.writer_wake, INFINITY);
      continue;
    }
    if (pump.queue.front().piece.at_s > t) {
      co_await sleep_until(pump.writer_wake, pump.queue.front().piece.at_s);
      continue;
    }
    const Pending next = std::move(pump.queue.front());
    pump.queue.pop_front();
    pump.queued -= next.piece.length;
    pump.in_flight = next.piece.length;
    auto [ec, n] = co_await asio::async_write(
        conn->to(up), asio::buffer(next.data->data() + next.piece.offset, next.piece.length), kTuple);
    pump.in_flight = 0;
    stats.written += n;
    stats.dropped += next.piece.length - n;  // a write cut short by a reset
    if (conn->closed) break;
    if (ec) {
      reset(*conn);
      break;
    }
    pump.reader_wake.cancel();
  }
}

nlohmann::json FaultProxy::link_stats(const Link& link) const {
  auto direction = [&](const DirectionStats& d, bool up) {
    std::uint64_t held = 0, closes_held = 0;
    for (const auto& conn : link.conns) {
      held += conn->pump(up).held();
      // A close (or reset) read from the sender and not yet passed on.
      if (conn->pump(up).eof && !conn->pump(up).done) ++closes_held;
    }
    return nlohmann::json{
        {"read", d.read}, {"written", d.written}, {"dropped", d.dropped}, {"held", held}, {"closes_held", closes_held}};
  };
  const auto& s = link.stats;
  return {{"accepted", s.accepted},
          {"open", link.conns.size()},
          {"pending", link.pending.size()},
          {"refused", s.refused},
          {"resets", s.resets},
          {"cuts", s.cuts},
          {"upstream_failures", s.upstream_failures},
          {"up", direction(s.up, true)},
          {"down", direction(s.down, false)},
          {"faults", describe(timeline_.state(link.config.name, now()))}};
}

nlohmann::json FaultProxy::stats() const {
  nlohmann::json links = nlohmann::json::object();
  for (const auto& link : links_) links[link->config.name] = link_stats(*link);
  return {{"t", now()}, {"links", links}};
}

}  // namespace geoloco::faultproxy
