#include "transport/mesh.h"

#include <spdlog/spdlog.h>

#include "common/host_port.h"

#include <asio/experimental/as_tuple.hpp>
#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <string_view>

namespace geoloco::transport {

namespace {
using asio::use_awaitable;
using asio::experimental::as_tuple;
using Clock = std::chrono::steady_clock;
}  // namespace

Mesh::Mesh(asio::any_io_executor executor, MeshOptions options, asio::any_io_executor connection_executor)
    : executor_(executor),
      connection_executor_(connection_executor ? connection_executor : executor),
      options_(std::move(options)),
      acceptor_(executor),
      slots_changed_(executor),
      op_changed_(executor),
      refusal_flush_(executor) {}

Mesh::~Mesh() { stop(); }

void Mesh::set_peer_address(const PeerAddress& peer) {
  for (auto& p : options_.peers)
    if (p.name == peer.name) p = peer;
}

Status Mesh::listen() {
  if (listening_) return {};
  GEOLOCO_TRY(options_.transport.validate());
  GEOLOCO_RETURN_IF(options_.site.empty(), Err::invalid_argument, "mesh: the site needs a name");
  for (const auto& p : options_.peers) {
    GEOLOCO_RETURN_IF(p.name == options_.site, Err::invalid_argument, "mesh: site '", p.name,
                      "' lists itself as a peer");
    slots_[p.name].resize(slot_count());
  }
  if (!options_.transport.insecure_plaintext_for_tests) {
    auto ctx = tls::make_context(options_.tls);
    if (!ctx.ok()) return ctx.status();
    GEOLOCO_TRY(tls::check_own_certificate((*ctx)->native_handle(), options_.site));
    ssl_ = *ctx;
  }
  const double rate = options_.transport.rate_limit_mbit * 1e6 / 8;
  // Bursts of 4 slices: enough to keep every connection busy, small against a second of traffic.
  limiter_ = std::make_shared<TokenBucket>(rate, 1024.0 * 1024);

  std::error_code ec;
  const auto address = asio::ip::make_address(options_.listen_host, ec);
  GEOLOCO_RETURN_IF(ec, Err::invalid_argument, "mesh: listen address '", options_.listen_host, "': ", ec.message());
  asio::ip::tcp::endpoint endpoint(address, options_.listen_port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "mesh: cannot listen on ", options_.listen_host, ":", options_.listen_port, ": ",
                    ec.message());
  port_ = acceptor_.local_endpoint().port();
  listening_ = true;
  return {};
}

Status Mesh::start() {
  GEOLOCO_TRY(listen());
  running_ = true;
  asio::co_spawn(executor_, accept_loop(), asio::detached);
  asio::co_spawn(executor_, flush_refusal_log(), asio::detached);
  for (const auto& p : options_.peers) {
    if (options_.site < p.name) {  // the name that sorts first dials
      auto& timers = dial_timers_[p.name];
      for (int k = 0; k < slot_count(); ++k) {
        if (timers.size() <= static_cast<std::size_t>(k))
          timers.push_back(std::make_unique<asio::steady_timer>(executor_));
        asio::co_spawn(executor_, dial_loop(p, k), asio::detached);
      }
    } else {  // the other knocks
      if (!knock_timers_.count(p.name)) knock_timers_[p.name] = std::make_unique<asio::steady_timer>(executor_);
      asio::co_spawn(executor_, knock_loop(p), asio::detached);
    }
  }
  return {};
}

void Mesh::stop() {
  if (!running_ && !listening_) return;
  running_ = false;
  listening_ = false;
  std::error_code ignored;
  acceptor_.close(ignored);
  for (auto& [peer, conns] : slots_)
    for (auto& c : conns)
      if (c) c->close(GEOLOCO_ERROR(Err::io, "mesh of ", options_.site, " stopped"));
  for (auto& [key, list] : retiring_)
    for (auto& r : list) r.conn->close(GEOLOCO_ERROR(Err::io, "mesh of ", options_.site, " stopped"));
  early_goodbyes_.clear();
  slots_changed_.notify_all();
  op_changed_.notify_all();
  for (auto& [peer, timers] : dial_timers_)
    for (auto& t : timers) t->cancel();
  for (auto& [peer, t] : knock_timers_) t->cancel();
  refusal_flush_.cancel();
  log_refusals(refusal_log_.drain(Clock::now()));
}

asio::any_io_executor Mesh::connection_strand() const { return asio::make_strand(connection_executor_); }

bool Mesh::is_peer(const std::string& name) const { return slots_.count(name) != 0; }

std::shared_ptr<Connection> Mesh::wrap(asio::ip::tcp::socket socket) {
  if (options_.transport.insecure_plaintext_for_tests)
    return make_plain_connection(std::move(socket), options_.transport, limiter_, &pool_);
  return make_tls_connection(std::move(socket), ssl_, options_.transport, limiter_, &pool_);
}

std::shared_ptr<Connection> Mesh::connection(const std::string& peer, int k) const {
  auto it = slots_.find(peer);
  if (it == slots_.end() || k < 0 || k >= static_cast<int>(it->second.size())) return nullptr;
  const auto& c = it->second[k];
  return c && c->is_open() ? c : nullptr;
}

asio::awaitable<Status> Mesh::wait_connected(std::vector<std::string> peers, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  asio::steady_timer timer(executor_, until);
  bool timed_out = false;
  timer.async_wait([&](std::error_code ec) {
    if (!ec) {
      timed_out = true;
      slots_changed_.notify_all();
    }
  });
  for (;;) {
    std::string missing;
    for (const auto& p : peers) {
      if (p == options_.site) continue;
      for (int k = 0; k < slot_count(); ++k) {
        if (!connection(p, k)) {
          missing += (missing.empty() ? "" : ", ") + p;
          break;
        }
      }
    }
    if (missing.empty()) {
      timer.cancel();
      co_return Status();
    }
    if (timed_out || !running_)
      co_return GEOLOCO_ERROR(Err::timeout, options_.site, ": not connected to ", missing, " after ", timeout.count(),
                              " ms");
    co_await slots_changed_.wait();
  }
}

void Mesh::begin(OpKey key, FrameSink* sink) {
  declined_.erase(key);  // declined, then run after all: its frames from now on are delivered
  if (newest_declined_ && !(key < *newest_declined_)) newest_declined_.reset();
  current_ = key;
  have_current_ = true;
  sink_ = sink;
  op_changed_.notify_all();
}

void Mesh::cancel(OpKey key, const Status& why) {
  if (have_current_ && current_ == key && sink_ != nullptr) sink_->cancel(why);
}

void Mesh::decline(OpKey key) {
  if (have_current_ && key <= current_) return;
  declined_.insert(key);
  while (declined_.size() > 64) declined_.erase(declined_.begin());
  if (!newest_declined_ || *newest_declined_ < key) newest_declined_ = key;
  op_changed_.notify_all();
}

void Mesh::set_job(std::uint64_t job) {
  options_.job = job;
  current_ = {};
  have_current_ = false;
  declined_.clear();
  newest_declined_.reset();
  sink_ = nullptr;
  op_changed_.notify_all();
}

void Mesh::end(OpKey key) {
  if (have_current_ && current_ == key) sink_ = nullptr;
  op_changed_.notify_all();
}

asio::awaitable<Result<bool>> Mesh::admit(const std::string& peer, const FrameHeader& h, Connection& conn) {
  if (h.type == FrameType::hello)
    co_return GEOLOCO_ERROR(Err::malformed, "unexpected hello from ", peer, " on an established connection");
  if (h.job != options_.job)
    co_return GEOLOCO_ERROR(Err::mismatch, "frame from ", peer, " for job ", h.job, ", this mesh serves job ",
                            options_.job);
  const OpKey key{h.round, h.attempt};
  // A frame of an operation this site has not begun yet waits for it; the
  // reader stops reading meanwhile, so nothing piles up in memory.
  auto declined = [&] {
    return (declined_.count(key) || (newest_declined_ && key < *newest_declined_)) &&
           !(have_current_ && key == current_);
  };
  while (running_ && conn.is_open() && (!have_current_ || key > current_) && !declined()) co_await op_changed_.wait();
  if (!conn.is_open()) co_return conn.close_reason();
  if (declined()) co_return false;
  if (key < current_ || sink_ == nullptr)
    co_return GEOLOCO_ERROR(Err::mismatch, "stale frame from ", peer, ": ", frame_type_name(h.type), " of round ",
                            h.round, " attempt ", h.attempt, ", which is over (current: round ", current_.round,
                            " attempt ", current_.attempt, ")");
  if (Status s = sink_->admit(peer, h); !s.ok()) co_return s;
  co_return true;
}

Status Mesh::check_slot(const std::string& peer, FrameType type, int slot) const {
  if (type == FrameType::hello) return {};    // refused by admit(), with its own reason
  if (type == FrameType::goodbye) return {};  // the last frame of any connection
  const bool control_connection = slot == control_slot();
  if (type == FrameType::control && !control_connection)
    return GEOLOCO_ERROR(Err::malformed, "control frame from ", peer, " on data connection ", slot,
                         "; control frames travel on the control connection only");
  if (type == FrameType::redial && !control_connection)
    return GEOLOCO_ERROR(Err::malformed, "redial frame from ", peer, " on data connection ", slot,
                         "; it travels on the control connection only");
  if (type != FrameType::control && type != FrameType::redial && control_connection)
    return GEOLOCO_ERROR(Err::malformed, frame_type_name(type), " frame from ", peer,
                         " on the control connection, which carries control frames only");
  return {};
}

asio::awaitable<void> Mesh::read_loop(std::string peer, int slot, std::shared_ptr<Connection> conn) {
  // A replacement is read only after the connection it replaced, up to the peer's goodbye.
  while (running_ && conn->is_open() && !may_read(peer, slot, conn.get())) co_await slots_changed_.wait();
  bool retired = false;
  while (running_ && conn->is_open()) {
    auto header = co_await conn->read_header();
    if (!header.ok()) {
      if (conn->is_open()) reject(peer, conn.get(), header.status());
      break;
    }
    if (Status placed = check_slot(peer, header->type, slot); !placed.ok()) {
      reject(peer, conn.get(), placed);
      break;
    }
    if (header->type == FrameType::goodbye) {
      retired = goodbye_heard(peer, slot, conn);
      break;
    }
    if (header->type == FrameType::redial) {
      if (!(options_.site < peer)) {
        reject(peer, conn.get(), GEOLOCO_ERROR(Err::malformed, "redial frame from ", peer, ", which dials this site"));
        break;
      }
      spdlog::info("[{}] {} has a new certificate: replacing the connections to it", options_.site, peer);
      replace_connections(peer);
      continue;
    }
    if (header->type == FrameType::control || header->type == FrameType::state) {
      // Control messages are not part of an operation: no gate, in order.
      const bool known_job = header->job == options_.job || header->job == 0;
      if (known_job && !control_handler_) {
        reject(peer, conn.get(),
               GEOLOCO_ERROR(Err::unsupported, "control frame from ", peer, ", but this site takes none"));
        break;
      }
      auto payload = co_await conn->read_payload(*header);
      if (!payload.ok()) {
        if (conn->is_open()) reject(peer, conn.get(), payload.status());
        break;
      }
      if (!known_job) {
        // A peer's job can start a moment before this site's (its heartbeats
        // overtake the job start on another path): read (its hash checked)
        // and dropped; the connection, and what follows on it, stays.
        ++foreign_job_frames_;
        spdlog::debug("dropped a {} frame of job {} from {}: this mesh serves job {}", frame_type_name(header->type),
                      header->job, peer, options_.job);
        pool_.release(std::move(*payload));
        continue;
      }
      Status handled = control_handler_(peer, *header, std::move(*payload));
      if (!handled.ok()) {
        reject(peer, conn.get(), handled);
        break;
      }
      continue;
    }
    auto admitted = co_await admit(peer, *header, *conn);
    if (!conn->is_open()) break;  // closed while waiting: not the peer's fault
    if (!admitted.ok()) {
      reject(peer, conn.get(), admitted.status());
      break;
    }
    auto payload = co_await conn->read_payload(*header);
    if (!payload.ok()) {
      if (conn->is_open()) reject(peer, conn.get(), payload.status());
      break;
    }
    if (!*admitted) {
      ++declined_frames_;  // an operation this site does not run: read (its hash checked) and dropped
      pool_.release(std::move(*payload));
      continue;
    }
    // The operation may have ended while the payload was on the wire.
    if (sink_ == nullptr || OpKey{header->round, header->attempt} != current_) {
      reject(peer, conn.get(),
             GEOLOCO_ERROR(Err::mismatch, "stale frame from ", peer, ": round ", header->round,
                           " ended while it arrived"));
      break;
    }
    Status delivered = sink_->deliver(peer, *header, std::move(*payload));
    if (!delivered.ok()) {
      reject(peer, conn.get(), delivered);
      break;
    }
  }
  if (!retired) {
    forget_retiring(peer, slot, conn.get());
    if (slot == control_slot() && running_) {
      auto it = slots_.find(peer);
      // Lost only when no newer connection took the slot meanwhile (a peer that restarted and dialed again).
      if (it != slots_.end() && it->second[slot] == conn) {
        const Status why = conn->close_reason().ok() ? GEOLOCO_ERROR(Err::io, "connection to ", peer, " closed")
                                                     : conn->close_reason();
        const std::string line = links_.lost(peer, why.message(), Clock::now());
        if (!line.empty()) spdlog::info("[{}] {}", options_.site, line);
        if (link_handler_) link_handler_(peer, false, why);
      }
    }
    // The operation's frames travel on the data connections: losing the control connection does not end it.
    if (sink_ != nullptr && slot != control_slot())
      sink_->peer_lost(peer, conn->close_reason().ok() ? GEOLOCO_ERROR(Err::io, "connection to ", peer, " closed")
                                                       : conn->close_reason());
  }
  slots_changed_.notify_all();  // the slot's dialer looks again
}

asio::awaitable<Status> Mesh::send_control(const std::string& peer, std::uint64_t round,
                                           std::span<const std::byte> payload) {
  FrameHeader h;
  h.type = FrameType::control;
  h.job = options_.job;
  h.round = round;
  co_return co_await send_control_frame(peer, h, payload);
}

asio::awaitable<Status> Mesh::send_control_frame(const std::string& peer, FrameHeader header,
                                                 std::span<const std::byte> payload) {
  if (header.type != FrameType::control)
    co_return GEOLOCO_ERROR(Err::invalid_argument, "send_control_frame sends control frames, not ",
                            frame_type_name(header.type));
  auto conn = connection(peer, control_slot());
  if (!conn) co_return GEOLOCO_ERROR(Err::io, options_.site, " is not connected to ", peer);
  co_return co_await conn->write_frame(header, payload);
}

asio::awaitable<Status> Mesh::send_state_frame(const std::string& peer, FrameHeader header,
                                               std::span<const std::byte> payload, int slot) {
  if (header.type != FrameType::state)
    co_return GEOLOCO_ERROR(Err::invalid_argument, "send_state_frame sends state frames, not ",
                            frame_type_name(header.type));
  if (slot < 0 || slot >= control_slot())
    co_return GEOLOCO_ERROR(Err::invalid_argument, "state frames travel on data connections 0..", control_slot() - 1,
                            ", not ", slot);
  auto conn = connection(peer, slot);
  // A data connection being dialed (the peer just came back: its control
  // connection, which carried the request, may be up before the others) is
  // waited for up to the connect timeout, as the all-reduce does.
  const auto until = Clock::now() + std::chrono::milliseconds(options_.transport.connect_timeout_ms);
  asio::steady_timer pause(executor_);
  while (!conn && running_ && Clock::now() < until) {
    pause.expires_after(std::chrono::milliseconds(20));
    co_await pause.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    conn = connection(peer, slot);
  }
  if (!conn) co_return GEOLOCO_ERROR(Err::io, options_.site, " is not connected to ", peer);
  co_return co_await conn->write_frame(header, payload);
}

void Mesh::log_refusals(const std::vector<std::string>& lines) {
  for (const auto& line : lines) {
    ++refusal_lines_;
    spdlog::warn("[{}] {}", options_.site, line);
  }
}

asio::awaitable<void> Mesh::flush_refusal_log() {
  // A flood that stopped still has its count said, within a window.
  while (running_) {
    refusal_flush_.expires_after(std::chrono::seconds(5));
    auto [ec] = co_await refusal_flush_.async_wait(as_tuple(use_awaitable));
    if (ec || !running_) break;
    log_refusals(refusal_log_.flush(Clock::now()));
  }
}

void Mesh::reject(const std::string& peer, Connection* conn, Status reason) {
  ++rejected_total_;
  log_refusals(refusal_log_.admit(without_ports(cat("refused ", peer, ": ", reason.message())), Clock::now()));
  rejections_.push_back({peer, reason});
  if (rejections_.size() > 64) rejections_.pop_front();
  if (conn != nullptr) conn->close(reason);
}

std::uint64_t Mesh::bytes_sent(const std::string& peer) const {
  std::uint64_t total = 0;
  if (auto r = retired_bytes_.find(peer); r != retired_bytes_.end()) total += r->second.first;
  for_each_connection(peer, [&](const Connection& c) { total += c.bytes_sent(); });
  return total;
}

std::uint64_t Mesh::bytes_received(const std::string& peer) const {
  std::uint64_t total = 0;
  if (auto r = retired_bytes_.find(peer); r != retired_bytes_.end()) total += r->second.second;
  for_each_connection(peer, [&](const Connection& c) { total += c.bytes_received(); });
  return total;
}

void Mesh::for_each_connection(const std::string& peer, const std::function<void(const Connection&)>& fn) const {
  for_each_connection_ptr(peer, [&fn](const std::shared_ptr<Connection>& c) { fn(*c); });
}

void Mesh::for_each_connection_ptr(const std::string& peer,
                                   const std::function<void(const std::shared_ptr<Connection>&)>& fn) const {
  if (auto s = slots_.find(peer); s != slots_.end())
    for (const auto& c : s->second)
      if (c) fn(c);
  for (int k = 0; k < slot_count(); ++k)
    if (auto r = retiring_.find({peer, k}); r != retiring_.end())
      for (const auto& old : r->second) fn(old.conn);
}

}  // namespace geoloco::transport
