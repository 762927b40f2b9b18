// How the mesh's connections come to be: the acceptor (TLS, the peer's
// hello checked against its certificate and this site's settings) and the
// one dialer per slot, which redials with backoff (mesh.h). What a live
// connection carries is mesh.cpp's; replacing one after a reload is
// mesh_rotation.cpp's.
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

// A hello names the connection's slot (chunk) and the sender's
// connections_per_peer (hello_connections()): both sides must agree on which slot is
// the control connection. Its round is 1 when the connection replaces a live
// one of the same slot (both sides then retire the old one with goodbyes), 0
// when the old one, if any, is gone.
FrameHeader hello_header(std::uint64_t job, int slot, int connections_per_peer, bool replacement) {
  FrameHeader h;
  h.type = FrameType::hello;
  h.job = job;
  h.round = replacement ? 1 : 0;
  h.chunk = static_cast<std::uint32_t>(slot);
  set_hello_connections(h, static_cast<std::uint32_t>(connections_per_peer));
  return h;
}

Status same_connection_count(const std::string& peer, std::uint32_t theirs, int ours) {
  GEOLOCO_RETURN_IF(theirs != static_cast<std::uint32_t>(ours), Err::invalid_argument, peer,
                    " has transport.connections_per_peer ", theirs, ", this site ", ours,
                    ": they must be the same on every site");
  return {};
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }
}  // namespace

asio::awaitable<void> Mesh::accept_loop() {
  while (running_) {
    auto [ec, socket] = co_await acceptor_.async_accept(connection_strand(), as_tuple(use_awaitable));
    if (ec) {
      if (!running_) break;
      spdlog::warn("[{}] accept failed: {}", options_.site, ec.message());
      continue;
    }
    asio::co_spawn(executor_, serve_incoming(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> Mesh::serve_incoming(asio::ip::tcp::socket socket) {
  const auto made_with = ssl_;
  auto conn = wrap(std::move(socket));
  Status s = co_await conn->handshake(false);
  if (!s.ok()) {
    reject(conn->peer(), conn.get(), s);
    co_return;
  }
  // The hello must come, whole, within the connect timeout: each read has its
  // own deadline, which keepalives would refresh forever, so this one is
  // absolute.
  conn->start();
  const int hello_ms = options_.transport.connect_timeout_ms;
  auto hello_timer = std::make_shared<asio::steady_timer>(executor_, std::chrono::milliseconds(hello_ms));
  hello_timer->async_wait([conn, hello_ms](const std::error_code& ec) {
    if (!ec) conn->close(GEOLOCO_ERROR(Err::timeout, "no hello within ", hello_ms, " ms of the handshake"));
  });
  struct CancelOnExit {
    std::shared_ptr<asio::steady_timer> timer;
    ~CancelOnExit() { timer->cancel(); }
  } cancel_hello_timer{hello_timer};
  auto header = co_await conn->read_header();
  if (!header.ok()) {
    reject(conn->peer(), conn.get(), header.status());
    co_return;
  }
  if (header->type != FrameType::hello && header->type != FrameType::knock) {
    reject(conn->peer(), conn.get(),
           GEOLOCO_ERROR(Err::malformed, "first frame is ", frame_type_name(header->type), ", expected hello"));
    co_return;
  }
  // A hello holds a site name: refused before its payload is read, so a peer
  // cannot make this site buffer a frame-sized hello.
  if (header->payload_size > kMaxHelloBytes) {
    reject(conn->peer(), conn.get(),
           GEOLOCO_ERROR(Err::malformed, "a hello of ", header->payload_size, " bytes; a site name is at most ",
                         kMaxHelloBytes));
    co_return;
  }
  auto payload = co_await conn->read_payload(*header);
  if (!payload.ok()) {
    reject(conn->peer(), conn.get(), payload.status());
    co_return;
  }
  hello_timer->cancel();
  const std::string claimed(reinterpret_cast<const char*>(payload->data()), payload->size());
  if (header->type == FrameType::knock) {
    // Only from a peer this site dials, under its own certificate; then the
    // connection has done its work.
    Status refused;
    if (!is_peer(claimed))
      refused =
          GEOLOCO_ERROR(Err::invalid_argument, "knock from '", claimed, "', which is not a peer of ", options_.site);
    else if (!(options_.site < claimed))
      refused = GEOLOCO_ERROR(Err::malformed, "knock from ", claimed, ", which dials this site");
    else if (Status named = co_await conn->check_peer_name(claimed); !named.ok()) refused = named;
    if (!refused.ok()) {
      reject(conn->peer(), conn.get(), refused);
      co_return;
    }
    knocked(claimed);
    conn->close(GEOLOCO_ERROR(Err::io, "knock from ", claimed, " heard"));
    co_return;
  }
  const int slot = static_cast<int>(header->chunk);
  Status refused;
  if (header->job != 0 && header->job != options_.job) {
    refused = GEOLOCO_ERROR(Err::mismatch, "hello from '", claimed, "' for job ", header->job,
                            ", this mesh serves job ", options_.job);
  } else if (!is_peer(claimed)) {
    refused =
        GEOLOCO_ERROR(Err::invalid_argument, "hello from '", claimed, "', which is not a peer of ", options_.site);
  } else if (Status named = co_await conn->check_peer_name(claimed); !named.ok()) {
    refused = named;
  } else if (Status same =
                 same_connection_count(claimed, hello_connections(*header), options_.transport.connections_per_peer);
             !same.ok()) {
    refused = same;
  } else if (slot < 0 || slot >= slot_count()) {
    refused =
        GEOLOCO_ERROR(Err::invalid_argument, "hello from '", claimed, "' for connection slot ", slot,
                      "; this site has slots 0..", slot_count() - 1, " (", options_.transport.connections_per_peer,
                      " data connections and a control connection): is connections_per_peer the same on both "
                      "sites?");
  }
  if (!refused.ok()) {
    reject(conn->peer(), conn.get(), refused);
    co_return;
  }
  // A TLS reload during the handshake: the peer is held to the new CA and CRL too.
  if (made_with != ssl_) {
    if (Status again = co_await conn->verify_peer_again(ssl_); !again.ok()) {
      reject(claimed, conn.get(), again);
      co_return;
    }
  }
  const FrameHeader reply = hello_header(0, slot, options_.transport.connections_per_peer, false);
  Status replied = co_await conn->write_frame(reply, bytes_of(options_.site));
  if (!replied.ok()) co_return;
  install(claimed, slot, conn, header->round == 1);
  co_await read_loop(claimed, slot, conn);
}

// The one dialer of a slot: it dials when the slot has no live connection,
// and dials a replacement when a reload asked for one. One dial at a time
// per slot, installed before the next begins, so both sides install a
// slot's connections in the same order (the order their readers follow).
asio::awaitable<void> Mesh::dial_loop(PeerAddress peer, int slot) {
  int backoff_ms = options_.transport.reconnect_initial_ms;
  asio::steady_timer& timer = *dial_timers_.at(peer.name).at(static_cast<std::size_t>(slot));
  while (running_) {
    const bool live = connection(peer.name, slot) != nullptr;
    if (live && !replacement_wanted(peer.name, slot)) {
      co_await slots_changed_.wait();
      continue;
    }
    Status s = co_await dial_once(peer, slot, live);
    if (!running_) break;
    if (s.ok()) {
      backoff_ms = options_.transport.reconnect_initial_ms;  // it worked; a drop retries promptly
      continue;
    }
    spdlog::debug("[{}] dial {} slot {}: {}", options_.site, peer.name, slot, s.message());
    backoff_ms = std::min(backoff_ms * 2, options_.transport.reconnect_max_ms);
    // The control slot speaks for the peer: one warning per reason, not one per dial and slot.
    if (slot == control_slot()) {
      const std::string line =
          links_.dial_failed(peer.name, s.message(), std::chrono::milliseconds(backoff_ms), Clock::now());
      if (!line.empty()) spdlog::warn("[{}] {}", options_.site, line);
    }
    const std::uint64_t knocks = knocks_[peer.name];
    timer.expires_after(std::chrono::milliseconds(backoff_ms));
    co_await timer.async_wait(as_tuple(use_awaitable));
    // Woken by the peer's knock: it has just started, dial it now and back off afresh if that fails.
    if (knocks_[peer.name] != knocks) backoff_ms = options_.transport.reconnect_initial_ms;
  }
}

void Mesh::knocked(const std::string& peer) {
  ++knocks_[peer];
  if (auto it = dial_timers_.find(peer); it != dial_timers_.end())
    for (auto& t : it->second) t->cancel();
  spdlog::debug("[{}] {} knocked: dialing it now", options_.site, peer);
}

asio::awaitable<void> Mesh::knock_loop(PeerAddress peer) {
  int backoff_ms = options_.transport.reconnect_initial_ms;
  asio::steady_timer& timer = *knock_timers_.at(peer.name);
  while (running_) {
    if (connection(peer.name, control_slot()) != nullptr) {
      backoff_ms = options_.transport.reconnect_initial_ms;
      co_await slots_changed_.wait();
      continue;
    }
    // Knocked or not, this waits before it knocks again, backing off: a
    // peer that cannot take this site's connections (another CA, revoked)
    // is not made to dial every few hundred milliseconds.
    auto conn = co_await open_to(peer);
    if (!running_) break;
    if (conn.ok()) {
      const FrameHeader knock{.type = FrameType::knock};
      Status s = co_await (*conn)->write_frame(knock, bytes_of(options_.site));
      (*conn)->close(s.ok() ? GEOLOCO_ERROR(Err::io, "knocked on ", peer.name) : s);
      if (!s.ok()) spdlog::debug("[{}] knock on {}: {}", options_.site, peer.name, s.message());
    } else {
      spdlog::debug("[{}] knock on {}: {}", options_.site, peer.name, conn.status().message());
    }
    timer.expires_after(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, options_.transport.reconnect_max_ms);
    co_await timer.async_wait(as_tuple(use_awaitable));
  }
}

asio::awaitable<Result<std::shared_ptr<Connection>>> Mesh::open_to(const PeerAddress& peer) {
  asio::ip::tcp::resolver resolver(executor_);
  auto [rec, endpoints] =
      co_await resolver.async_resolve(peer.host, std::to_string(peer.port), as_tuple(use_awaitable));
  if (rec) co_return GEOLOCO_ERROR(Err::io, "cannot resolve ", peer.host, ": ", rec.message());
  asio::ip::tcp::socket socket(connection_strand());
  // The socket is used on its strand only, the connect and its deadline too.
  const auto timeout = std::chrono::milliseconds(options_.transport.connect_timeout_ms);
  auto connect = [&socket, &endpoints, timeout]() -> asio::awaitable<std::error_code> {
    asio::steady_timer deadline(socket.get_executor(), timeout);
    deadline.async_wait([&socket](std::error_code ec) {
      if (!ec) socket.close();  // connect took too long
    });
    auto [ec, endpoint] = co_await asio::async_connect(socket, endpoints, as_tuple(use_awaitable));
    deadline.cancel();
    co_return ec;
  };
  const std::error_code cec = co_await asio::co_spawn(socket.get_executor(), connect(), use_awaitable);
  if (cec)
    co_return GEOLOCO_ERROR(Err::io, "cannot connect to ", peer.name, " at ", peer.host, ":", peer.port, ": ",
                            cec.message());
  auto conn = wrap(std::move(socket));
  conn->set_peer(peer.name);
  Status s = co_await conn->handshake(true);
  if (!s.ok()) {
    // This site refused the peer's certificate (revoked, expired, another
    // CA): said and counted, as on the accepting side.
    if (s.message().find(tls::kPeerCertificateRefused) != std::string::npos) reject(peer.name, nullptr, s);
    co_return s;
  }
  if (Status named = co_await conn->check_peer_name(peer.name); !named.ok()) {
    conn->close(named);
    co_return named;
  }
  conn->start();
  co_return conn;
}

// One connection attempt: installed (its reader started) or failed.
asio::awaitable<Status> Mesh::dial_once(const PeerAddress& peer, int slot, bool replacement) {
  const auto made_with = ssl_;
  auto opened = co_await open_to(peer);
  if (!opened.ok()) co_return opened.status();
  std::shared_ptr<Connection> conn = std::move(*opened);
  Status s;
  // replacement: the slot's live connection is retired gracefully (a reload); else a fresh start.
  const FrameHeader hello = hello_header(0, slot, options_.transport.connections_per_peer, replacement);
  s = co_await conn->write_frame(hello, bytes_of(options_.site));
  if (!s.ok()) co_return s;
  auto header = co_await conn->read_header();
  if (!header.ok()) co_return header.status();
  if (header->type != FrameType::hello || header->payload_size > kMaxHelloBytes) {
    Status wrong = GEOLOCO_ERROR(Err::malformed, peer.name, " answered hello with a ", frame_type_name(header->type),
                                 " frame of ", header->payload_size, " bytes");
    conn->close(wrong);
    co_return wrong;
  }
  auto payload = co_await conn->read_payload(*header);
  if (!payload.ok()) co_return payload.status();
  const std::string answered(reinterpret_cast<const char*>(payload->data()), payload->size());
  if (header->type != FrameType::hello || answered != peer.name) {
    Status wrong = GEOLOCO_ERROR(Err::malformed, peer.name, " answered hello as '", answered, "'");
    conn->close(wrong);
    co_return wrong;
  }
  if (Status same =
          same_connection_count(peer.name, hello_connections(*header), options_.transport.connections_per_peer);
      !same.ok()) {
    reject(peer.name, conn.get(), same);
    co_return same;
  }
  if (made_with != ssl_) {
    if (Status again = co_await conn->verify_peer_again(ssl_); !again.ok()) {
      reject(peer.name, conn.get(), again);
      co_return again;
    }
  }
  install(peer.name, slot, conn, replacement);
  asio::co_spawn(executor_, read_loop(peer.name, slot, conn), asio::detached);
  co_return Status();
}

}  // namespace geoloco::transport
