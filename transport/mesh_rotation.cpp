// The mesh's connections over time: installing a new connection in a slot,
// retiring a replaced one gracefully (goodbye both ways, read to the end),
// and a TLS reload that re-checks live peers and replaces every connection.
#include <spdlog/spdlog.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>

#include "transport/mesh.h"

namespace geoloco::transport {

void Mesh::install(const std::string& peer, int slot, std::shared_ptr<Connection> conn, bool replacement) {
  conn->set_peer(peer);
  if (!running_) {
    // Its hello completed after stop(): nobody would close it, and its
    // watchdog and keepalives would keep the I/O threads running for good.
    conn->close(GEOLOCO_ERROR(Err::io, "mesh of ", options_.site, " stopped"));
    return;
  }
  const std::pair<std::string, int> key{peer, slot};
  auto& current = slots_[peer][slot];
  auto early = early_goodbyes_.find(key);
  const bool heard = early != early_goodbyes_.end() && early->second == current;
  if (early != early_goodbyes_.end()) early_goodbyes_.erase(early);
  if (replacement && current && current->is_open()) {
    // Read on to the peer's goodbye (unless it came already); this site's
    // frames go on the new one from now on, after this site's goodbye on the old.
    retiring_[key].push_back({current, false, heard});
    asio::co_spawn(executor_, say_goodbye(peer, slot, current), asio::detached);
  } else if (current) {
    // A fresh connection: the peer gave the slot's connection up. Older
    // ones still draining stay, and are read to their end first.
    if (current->is_open()) current->close(GEOLOCO_ERROR(Err::io, "replaced by a new connection from ", peer));
    retired_bytes_[peer].first += current->bytes_sent();
    retired_bytes_[peer].second += current->bytes_received();
  }
  current = std::move(conn);
  ++installs_[key];
  spdlog::debug("[{}] connected to {} (slot {}{})", options_.site, peer, slot, replacement ? ", a replacement" : "");
  // The peer dials this site and was not told of its reload yet: now it can be.
  if (slot == control_slot() && redial_owed_.count(peer)) send_redial(peer);
  if (slot == control_slot()) {
    auto known = links_.links().find(peer);
    const bool was_up = known != links_.links().end() && known->second.up;
    const std::string line = links_.connected(peer, std::chrono::steady_clock::now());
    if (!line.empty()) spdlog::info("[{}] {}", options_.site, line);
    if (!was_up && link_handler_) link_handler_(peer, true, {});
  }
  slots_changed_.notify_all();
}

bool Mesh::replacement_wanted(const std::string& peer, int slot) const {
  const std::pair<std::string, int> key{peer, slot};
  auto want = replace_upto_.find(key);
  if (want == replace_upto_.end()) return false;
  auto made = installs_.find(key);
  return made == installs_.end() || made->second <= want->second;
}

asio::awaitable<void> Mesh::say_goodbye(std::string peer, int slot, std::shared_ptr<Connection> conn) {
  FrameHeader h;
  h.type = FrameType::goodbye;
  Status s = co_await conn->write_frame(h, {});
  if (s.ok()) {
    goodbye_done(peer, slot, conn.get(), true);
  } else {
    conn->close(s);
    forget_retiring(peer, slot, conn.get());
  }
}

void Mesh::goodbye_done(const std::string& peer, int slot, const Connection* conn, bool ours) {
  auto it = retiring_.find({peer, slot});
  if (it == retiring_.end()) return;
  for (auto& r : it->second) {
    if (r.conn.get() != conn) continue;
    (ours ? r.ours : r.theirs) = true;
    if (r.ours && r.theirs) {
      // Nothing more will come either way: a clean end, no bytes left unread.
      r.conn->close(GEOLOCO_ERROR(Err::io, "replaced by a new connection (both sides said goodbye)"));
      ++replaced_connections_;
      forget_retiring(peer, slot, conn);
    }
    return;
  }
}

bool Mesh::goodbye_heard(const std::string& peer, int slot, const std::shared_ptr<Connection>& conn) {
  if (auto it = retiring_.find({peer, slot}); it != retiring_.end())
    for (auto& r : it->second)
      if (r.conn == conn) {
        goodbye_done(peer, slot, conn.get(), false);
        return true;
      }
  if (connection(peer, slot) == conn) {
    // The slot's own connection: the peer installed the replacement before
    // this site did (the hello and its reply cross on another connection).
    // This site still writes here until it installs the replacement too,
    // which then retires this one with the peer's goodbye counted. If none
    // comes within the connect timeout, nothing more will: it is closed.
    early_goodbyes_[{peer, slot}] = conn;
    const int ms = options_.transport.connect_timeout_ms;
    auto timer = std::make_shared<asio::steady_timer>(executor_, std::chrono::milliseconds(ms));
    timer->async_wait([this, timer, conn, peer, slot, ms](const std::error_code& ec) {
      auto it = early_goodbyes_.find({peer, slot});
      if (ec || !running_ || it == early_goodbyes_.end() || it->second != conn) return;
      early_goodbyes_.erase(it);
      conn->close(
          GEOLOCO_ERROR(Err::io, peer, " said goodbye on slot ", slot, ", and no replacement came within ", ms, " ms"));
      slots_changed_.notify_all();
    });
    return true;
  }
  conn->close(GEOLOCO_ERROR(Err::io, peer, " said goodbye on slot ", slot, " on a connection already replaced"));
  return false;
}

void Mesh::forget_retiring(const std::string& peer, int slot, const Connection* conn) {
  auto it = retiring_.find({peer, slot});
  if (it == retiring_.end()) return;
  auto& list = it->second;
  for (auto r = list.begin(); r != list.end(); ++r) {
    if (r->conn.get() != conn) continue;
    retired_bytes_[peer].first += r->conn->bytes_sent();
    retired_bytes_[peer].second += r->conn->bytes_received();
    list.erase(r);
    break;
  }
  if (list.empty()) retiring_.erase(it);
  slots_changed_.notify_all();
}

bool Mesh::may_read(const std::string& peer, int slot, const Connection* conn) const {
  auto it = retiring_.find({peer, slot});
  if (it == retiring_.end()) return true;
  // Every open connection older than `conn` in this slot must be read to its end first.
  for (const auto& r : it->second) {
    if (r.conn.get() == conn) return true;
    if (r.conn->is_open()) return false;
  }
  return true;
}

void Mesh::replace_connections(const std::string& peer) {
  if (!is_peer(peer) || !(options_.site < peer)) return;
  // The slot's dialer replaces every connection installed up to now.
  for (int k = 0; k < slot_count(); ++k) replace_upto_[{peer, k}] = installs_[{peer, k}];
  slots_changed_.notify_all();
}

void Mesh::send_redial(const std::string& peer) {
  redial_owed_.insert(peer);
  auto control = connection(peer, control_slot());
  if (!control) return;  // asked once its control connection is back (install())
  asio::co_spawn(
      executor_,
      [this, control, peer]() -> asio::awaitable<void> {
        FrameHeader h;
        h.type = FrameType::redial;
        if (Status s = co_await control->write_frame(h, {}); s.ok()) redial_owed_.erase(peer);
        else spdlog::info("[{}] could not ask {} to replace its connections yet: {}", options_.site, peer, s.message());
      },
      asio::detached);
}

Status Mesh::reload_tls(const tls::TlsFiles& files) {
  GEOLOCO_RETURN_IF(options_.transport.insecure_plaintext_for_tests, Err::invalid_argument,
                    "a plaintext test mesh has no TLS to reload");
  auto ctx = tls::make_context(files);
  if (!ctx.ok()) return ctx.status();
  GEOLOCO_TRY(tls::check_own_certificate((*ctx)->native_handle(), options_.site));
  ssl_ = *ctx;
  options_.tls = files;
  if (!running_) return {};
  // Every live connection's peer is held to the new CA and CRL at once,
  // those still draining too; the rest are replaced.
  for (const auto& [peer, conns] : slots_)
    for_each_connection_ptr(peer, [&](const std::shared_ptr<Connection>& c) {
      if (c->is_open()) asio::co_spawn(executor_, check_again(peer, c), asio::detached);
    });
  for (const auto& [peer, conns] : slots_) {
    if (options_.site < peer) replace_connections(peer);
    else send_redial(peer);
  }
  return {};
}

asio::awaitable<void> Mesh::check_again(std::string peer, std::shared_ptr<Connection> conn) {
  Status s = co_await conn->verify_peer_again(ssl_);
  if (!s.ok() && conn->is_open())
    reject(peer, conn.get(),
           GEOLOCO_ERROR(Err::invalid_argument, "the certificate of ", peer,
                         " is refused since this site's TLS reload: ", s.message()));
}

std::map<std::string, std::int64_t> Mesh::peer_certificate_expiries() const {
  std::map<std::string, std::int64_t> out;
  for (const auto& [peer, conns] : slots_)
    for (const auto& c : conns) {
      if (!c || !c->is_open() || c->peer_certificate_expiry() == 0) continue;
      auto [it, first] = out.try_emplace(peer, c->peer_certificate_expiry());
      if (!first) it->second = std::min(it->second, c->peer_certificate_expiry());
    }
  return out;
}

}  // namespace geoloco::transport
