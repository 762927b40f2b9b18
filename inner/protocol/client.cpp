// The trainer side of the local sync protocol (client.h).
#include "inner/protocol/client.h"

#include <array>
#include <chrono>

#include "inner/protocol/layout.h"

namespace geoloco::inner::protocol {
namespace {

int ms_left(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<long long>(0, left.count()));
}

}  // namespace

Result<std::unique_ptr<Client>> Client::connect(const std::string& socket_path, const std::string& job,
                                                const Layout& layout, const ClientOptions& options) {
  Status s = check_layout(layout);
  GEOLOCO_RETURN_IF(!s.ok(), s.code(), "the trainer's layout: ", s.message());
  std::unique_ptr<Client> c(new Client());
  c->inbox_ = MessageBuffer(options.limits);
  c->layout_ = layout;
  auto fd = connect_unix(socket_path, options.connect_timeout_ms);
  if (!fd.ok()) return fd.status();
  c->socket_ = std::move(*fd);
  // A daemon that refuses at once (a second trainer) may close before the
  // HELLO is through; its ERROR is still waiting to be read, so read first.
  Status sent = c->send_message(HelloMsg{job, layout});
  auto m = c->receive(sent.ok() ? options.welcome_timeout_ms : 1000);
  if (!m.ok()) return sent.ok() ? m.status() : sent;
  if (auto* e = std::get_if<ErrorMsg>(&*m)) return c->refusal(*e);
  auto* w = std::get_if<WelcomeMsg>(&*m);
  GEOLOCO_RETURN_IF(w == nullptr, Err::malformed, "the daemon answered HELLO with ", message_type_name(type_of(*m)),
                    " instead of WELCOME");
  const std::uint64_t values = layout_values(layout);
  GEOLOCO_RETURN_IF(w->values != values, Err::mismatch, "WELCOME announces ", w->values, " values; the layout has ",
                    values);
  s = check_fragments(w->fragments, layout);
  GEOLOCO_RETURN_IF(!s.ok(), Err::malformed, "WELCOME's fragment table: ", s.message());
  GEOLOCO_RETURN_IF(c->fds_.size() != 1, Err::malformed, "WELCOME came with ", c->fds_.size(),
                    " descriptors instead of the one shared-memory segment");
  auto segment = SharedSegment::map(std::move(c->fds_.front()), values);
  c->fds_.clear();
  if (!segment.ok()) return segment.status();
  c->segment_ = std::move(*segment);
  c->fragments_ = w->fragments;
  c->in_flight_.assign(w->fragments.size(), false);
  c->anchor_ready_ = w->anchor_ready();
  c->plan_ = w->plan;
  return c;
}

std::span<float> Client::fragment_values(std::uint32_t fragment) {
  const auto& f = fragments_.at(fragment);
  return segment_.values().subspan(f.offset, f.length);
}

Status Client::send_initial(int timeout_ms) {
  GEOLOCO_RETURN_IF(anchor_ready_, Err::invalid_argument, "the daemon sent the anchor; it did not ask for INIT");
  GEOLOCO_TRY(send_message(InitMsg{}));
  init_pending_ = true;
  auto r = wait_result(timeout_ms);
  if (!r.ok()) return r.status();
  GEOLOCO_RETURN_IF(r->fragment != kAllFragments, Err::malformed, "INIT was answered with a RESULT for fragment ",
                    r->fragment, " instead of all");
  return {};
}

Status Client::sync(std::uint64_t round, std::uint32_t fragment, std::uint64_t tokens, double loss,
                    std::optional<SyncTiming> timing) {
  GEOLOCO_TRY(send_message(SyncMsg{round, fragment, tokens, loss, timing}));
  if (fragment < in_flight_.size()) in_flight_[fragment] = true;
  return {};
}

Result<ResultMsg> Client::wait_result(int timeout_ms) {
  auto m = receive(timeout_ms);
  if (!m.ok()) return m.status();
  if (auto* e = std::get_if<ErrorMsg>(&*m)) {
    // The refused SYNC is no longer in flight: the trainer owns the fragment again.
    if (e->refused == static_cast<std::uint8_t>(MessageType::sync) && e->fragment < in_flight_.size()) {
      in_flight_[e->fragment] = false;
    }
    if (e->refused == static_cast<std::uint8_t>(MessageType::init)) init_pending_ = false;
    return refusal(*e);
  }
  auto* r = std::get_if<ResultMsg>(&*m);
  GEOLOCO_RETURN_IF(r == nullptr, Err::malformed, "the daemon sent ", message_type_name(type_of(*m)),
                    " where RESULT or ERROR was expected");
  return accept_result(*r);
}

Result<ResultMsg> Client::accept_result(const ResultMsg& r) {
  if (r.fragment == kAllFragments) {
    GEOLOCO_RETURN_IF(!init_pending_, Err::malformed, "the daemon sent a RESULT for all fragments without an INIT");
    init_pending_ = false;
    anchor_ready_ = true;
    // The fragment table stays as WELCOME said: with Streaming DiLoCo each
    // fragment has its own next round, which an INIT does not change.
  } else {
    GEOLOCO_RETURN_IF(r.fragment >= fragments_.size() || !in_flight_[r.fragment], Err::malformed,
                      "the daemon sent a RESULT for fragment ", r.fragment, ", which is not being synchronized");
    GEOLOCO_RETURN_IF(r.next_round <= r.round, Err::malformed, "RESULT of round ", r.round, " names next round ",
                      r.next_round);
    in_flight_[r.fragment] = false;
    fragments_[r.fragment].next_round = r.next_round;
  }
  if (r.stop()) stopped_ = true;
  return r;
}

Status Client::refusal(const ErrorMsg& e) const {
  std::string what = e.refused ? cat("daemon refused ", message_type_name(MessageType(e.refused))) : "daemon error";
  if (e.refused == static_cast<std::uint8_t>(MessageType::sync))
    what += cat(" (round ", e.round, ", fragment ", e.fragment, ")");
  return Status(e.code, cat(what, ": ", e.reason, e.fatal ? " [connection closed]" : ""));
}

Status Client::send_raw(std::span<const std::byte> bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    auto n = send_some(socket_.get(), bytes.subspan(sent));
    if (!n.ok()) return n.status();
    if (*n == 0) {
      auto ready = wait_fd(socket_.get(), true, -1);
      if (!ready.ok()) return ready.status();
    }
    sent += *n;
  }
  return {};
}

Status Client::send_message(const Message& message) {
  auto bytes = encode(message);
  if (!bytes.ok()) return bytes.status();
  return send_raw(*bytes);
}

Result<Message> Client::receive(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::array<std::byte, 4096> chunk;
  for (;;) {
    auto raw = inbox_.next();
    if (!raw.ok()) return Status(raw.status().code(), cat("from the daemon: ", raw.status().message()));
    if (raw->has_value()) {
      auto m = decode_body((*raw)->header.type, (*raw)->body);
      if (!m.ok()) return Status(m.status().code(), cat("from the daemon: ", m.status().message()));
      return m;
    }
    auto ready = wait_fd(socket_.get(), false, ms_left(deadline));
    if (!ready.ok()) return ready.status();
    GEOLOCO_RETURN_IF(!*ready, Err::timeout, "no answer from the daemon within ", timeout_ms, " ms");
    auto n = recv_some(socket_.get(), chunk, &fds_);
    if (!n.ok()) return n.status();
    if (!n->has_value()) continue;
    GEOLOCO_RETURN_IF(**n == 0, Err::io, "the daemon closed the connection",
                      inbox_.pending() ? " in the middle of a message" : "");
    inbox_.append(std::span(chunk.data(), **n));
  }
}

}  // namespace geoloco::inner::protocol
