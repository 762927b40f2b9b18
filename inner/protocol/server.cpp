// The daemon side of the local sync protocol (server.h).
#include "inner/protocol/server.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "inner/protocol/layout.h"

namespace geoloco::inner::protocol {
namespace {

// Bytes read per recv(); messages other than HELLO are tens of bytes.
constexpr std::size_t kReadChunk = 64 * 1024;

}  // namespace

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::no_trainer:
      return "no trainer";
    case Phase::awaiting_hello:
      return "awaiting HELLO";
    case Phase::hello_pending:
      return "HELLO pending";
    case Phase::awaiting_init:
      return "awaiting INIT";
    case Phase::init_pending:
      return "INIT pending";
    case Phase::training:
      return "training";
  }
  return "unknown";
}

Result<std::unique_ptr<Server>> Server::open(ServerOptions options) {
  GEOLOCO_RETURN_IF(options.job.empty() || options.job.size() > kMaxNameBytes, Err::invalid_argument,
                    "the job name must have 1 to ", kMaxNameBytes, " bytes");
  if (!options.expected_layout.empty()) {
    Status s = check_layout(options.expected_layout);
    GEOLOCO_RETURN_IF(!s.ok(), Err::invalid_argument, "the job's expected layout: ", s.message());
  }
  std::unique_ptr<Server> server(new Server(std::move(options)));
  auto fd = listen_unix(server->options_.socket_path);
  if (!fd.ok()) return fd.status();
  server->listen_ = std::move(*fd);
  server->layout_ = server->options_.expected_layout;
  return server;
}

Server::~Server() {
  trainer_.reset();
  if (listen_.valid()) {
    listen_.reset();
    ::unlink(options_.socket_path.c_str());
  }
}

std::vector<Event> Server::take_events() { return std::exchange(events_, {}); }

std::span<float> Server::segment_values() { return segment_.mapped() ? segment_.values() : std::span<float>(); }

ServerSnapshot Server::snapshot() const { return ServerSnapshot{phase_, layout_, fragments_}; }

void Server::on_listen_readable() {
  // A trainer that died and was restarted at once: its old connection's end
  // is already readable, so handle it before judging the new one "second".
  if (trainer_.valid()) on_trainer_readable();
  for (;;) {
    auto accepted = accept_unix(listen_.get());
    if (!accepted.ok()) {
      events_.push_back(RefusalEvent{accepted.status(), true});
      return;
    }
    if (!accepted->has_value()) return;
    UniqueFd fd = std::move(**accepted);
    if (trainer_.valid()) {
      // One trainer per job: with several GPUs only rank 0 talks to the daemon.
      Status why = GEOLOCO_ERROR(Err::invalid_argument, "job '", options_.job, "' already has a trainer attached (pid ",
                                 trainer_pid_, "); only one process (rank 0) may talk to the daemon");
      ErrorMsg e{why.code(), true, 0, kNoFragment, 0, why.message()};
      if (auto bytes = encode(e); bytes.ok())
        (void)send_some(fd.get(), *bytes);  // best effort: a fresh socket has room
      events_.push_back(RefusalEvent{why, true});
      continue;
    }
    trainer_ = std::move(fd);
    connected_at_ = std::chrono::steady_clock::now();
    ++trainer_generation_;
    trainer_pid_ = peer_pid(trainer_.get());
    phase_ = Phase::awaiting_hello;
    inbox_ = MessageBuffer(options_.limits);
    outbox_.clear();
  }
}

std::optional<std::chrono::steady_clock::time_point> Server::hello_deadline() const {
  if (!trainer_.valid() || phase_ != Phase::awaiting_hello) return std::nullopt;
  return connected_at_ + std::chrono::milliseconds(options_.hello_timeout_ms);
}

void Server::on_hello_deadline(std::chrono::steady_clock::time_point now) {
  const auto deadline = hello_deadline();
  if (!deadline || now < *deadline) return;
  Status why = GEOLOCO_ERROR(Err::timeout, "no complete HELLO within ", options_.hello_timeout_ms,
                             " ms of connecting (", inbox_.pending(),
                             " bytes of one arrived); the connection is "
                             "closed and the job's trainer slot is free");
  events_.push_back(RefusalEvent{why, true});
  drop_trainer(why.code(), why.message());
}

void Server::on_trainer_readable() {
  if (!trainer_.valid()) return;
  std::array<std::byte, kReadChunk> chunk;
  for (;;) {
    // A trainer never passes descriptors to the daemon: any that arrive are closed.
    auto n = recv_some(trainer_.get(), chunk, nullptr);
    if (!n.ok()) {
      // The trainer is gone: nothing queued can reach it. Dropping the queue
      // first also keeps close_trainer's own flush from failing again, and
      // again (the two used to recurse until the stack overflowed).
      outbox_.clear();
      close_trainer(n.status(), true);
      return;
    }
    if (!n->has_value()) break;  // drained
    if (**n == 0) {
      if (inbox_.pending() != 0) {
        close_trainer(GEOLOCO_ERROR(Err::truncated, "the trainer closed the connection in the middle of a message (",
                                    inbox_.pending(), " bytes of it arrived)"),
                      true);
      } else {
        close_trainer(GEOLOCO_ERROR(Err::io, "the trainer closed the connection"), true);
      }
      return;
    }
    inbox_.append(std::span(chunk.data(), **n));
    // Handle as we go so a flood cannot grow the buffer without bound.
    while (trainer_.valid()) {
      auto raw = inbox_.next();
      if (!raw.ok()) {
        // The header cannot be trusted, so neither can the stream after it.
        refuse(raw.status(), MessageType{0}, true);
        return;
      }
      if (!raw->has_value()) break;
      handle(**raw);
    }
    if (!trainer_.valid()) return;
  }
}

void Server::on_trainer_writable() { flush(); }

void Server::handle(const MessageBuffer::Raw& raw) {
  MessageType type = raw.header.type;
  bool from_trainer = type == MessageType::hello || type == MessageType::init || type == MessageType::sync;
  if (!from_trainer) {
    refuse(GEOLOCO_ERROR(Err::malformed, message_type_name(type), " is a daemon's message; a trainer may send HELLO, ",
                         "INIT and SYNC"),
           type, false);
    return;
  }
  auto message = decode_body(type, raw.body);
  if (!message.ok()) {
    // A bad HELLO leaves no session to continue; a bad SYNC leaves the session as it was.
    refuse(message.status(), type, type == MessageType::hello);
    return;
  }
  if (type == MessageType::hello) handle_hello(std::get<HelloMsg>(*message));
  if (type == MessageType::init) handle_init();
  if (type == MessageType::sync) handle_sync(std::get<SyncMsg>(*message));
}

void Server::handle_hello(const HelloMsg& hello) {
  if (phase_ != Phase::awaiting_hello) {
    refuse(GEOLOCO_ERROR(Err::invalid_argument, "HELLO was already received on this connection (", phase_name(phase_),
                         ")"),
           MessageType::hello, false);
    return;
  }
  if (hello.job != options_.job) {
    refuse(GEOLOCO_ERROR(Err::mismatch, "this socket serves job '", options_.job, "', the trainer asked for '",
                         hello.job, "'"),
           MessageType::hello, true);
    return;
  }
  if (Status s = check_layout(hello.layout); !s.ok()) {
    refuse(GEOLOCO_ERROR(s.code(), "the trainer's layout is invalid: ", s.message()), MessageType::hello, true);
    return;
  }
  if (!layout_.empty()) {
    if (Status s = compare_layouts(layout_, hello.layout); !s.ok()) {
      refuse(
          GEOLOCO_ERROR(Err::mismatch, "the trainer's layout does not match job '", options_.job, "': ", s.message()),
          MessageType::hello, true);
      return;
    }
  }
  hello_layout_ = hello.layout;
  phase_ = Phase::hello_pending;
  events_.push_back(HelloEvent{hello.job, hello.layout, trainer_pid_});
}

void Server::handle_init() {
  if (phase_ != Phase::awaiting_init) {
    refuse(GEOLOCO_ERROR(Err::invalid_argument, "INIT is only valid after a WELCOME that asked for the initial ",
                         "parameters (now: ", phase_name(phase_), ")"),
           MessageType::init, false);
    return;
  }
  phase_ = Phase::init_pending;
  events_.push_back(InitEvent{segment_.values()});
}

void Server::handle_sync(const SyncMsg& sync) {
  if (phase_ != Phase::training) {
    refuse(GEOLOCO_ERROR(Err::invalid_argument,
                         "SYNC before the trainer was welcomed with an anchor (now: ", phase_name(phase_), ")"),
           MessageType::sync, false, sync.fragment, sync.round);
    return;
  }
  if (Status s = check_sync(sync, fragments_); !s.ok()) {
    refuse(s, MessageType::sync, false, sync.fragment, sync.round);
    return;
  }
  const auto& desc = fragments_[sync.fragment].desc;
  auto replica = segment_.values().subspan(desc.offset, desc.length);
  if (options_.check_finite) {
    if (Status s = check_finite(replica, desc.offset, layout_); !s.ok()) {
      refuse(s, MessageType::sync, false, sync.fragment, sync.round);
      return;
    }
  }
  fragments_[sync.fragment].in_flight = true;
  synced_by_[sync.fragment] = trainer_generation_;
  events_.push_back(SyncEvent{sync, replica});
}

void Server::refuse(const Status& why, MessageType refused, bool fatal, std::uint32_t fragment, std::uint64_t round) {
  events_.push_back(RefusalEvent{why, fatal});
  send(ErrorMsg{why.code(), fatal, static_cast<std::uint8_t>(refused), fragment, round, why.message()});
  if (fatal) close_trainer(why, false);
}

void Server::send(const Message& message, int pass_fd) {
  if (!trainer_.valid()) return;
  auto bytes = encode(message);
  if (!bytes.ok()) {
    close_trainer(bytes.status(), true);
    return;
  }
  outbox_.push_back(Outgoing{std::move(*bytes), 0, pass_fd});
  flush();
}

void Server::flush() {
  while (trainer_.valid() && !outbox_.empty()) {
    auto& out = outbox_.front();
    auto n = send_some(trainer_.get(), std::span(out.bytes).subspan(out.sent), out.sent == 0 ? out.pass_fd : -1);
    if (!n.ok()) {
      // The trainer is gone: nothing queued can reach it. Dropping the queue
      // first also keeps close_trainer's own flush from failing again, and
      // again (the two used to recurse until the stack overflowed).
      outbox_.clear();
      close_trainer(n.status(), true);
      return;
    }
    if (*n == 0) return;  // full: on_trainer_writable() continues
    out.sent += *n;
    if (out.sent == out.bytes.size()) outbox_.pop_front();
  }
}

void Server::close_trainer(Status reason, bool report) {
  if (!trainer_.valid()) return;
  // A fatal ERROR goes out best effort before the close; a trainer that is
  // not reading cannot hold the daemon up.
  flush();
  if (!trainer_.valid()) return;  // the flush failed and already closed it
  trainer_.reset();
  trainer_pid_ = -1;
  outbox_.clear();
  phase_ = Phase::no_trainer;
  if (report) events_.push_back(TrainerLeftEvent{std::move(reason)});
}

Status Server::check_welcome(std::span<const FragmentDesc> fragments) const {
  GEOLOCO_RETURN_IF(phase_ != Phase::hello_pending, Err::invalid_argument,
                    "no HELLO is waiting for an answer (now: ", phase_name(phase_), ")");
  for (std::size_t f = 0; f < fragments_.size(); ++f) {
    GEOLOCO_RETURN_IF(fragments_[f].in_flight, Err::invalid_argument, "fragment ", f,
                      " of the previous trainer is still in flight; complete_sync() it before welcoming a new one");
  }
  Status s = check_fragments(fragments, hello_layout_);
  GEOLOCO_RETURN_IF(!s.ok(), Err::invalid_argument, "bad fragment table: ", s.message());
  return {};
}

Status Server::do_welcome(std::span<const FragmentDesc> fragments, std::span<const float> anchor, bool anchor_ready) {
  GEOLOCO_TRY(check_welcome(fragments));
  const std::uint64_t values = layout_values(hello_layout_);
  GEOLOCO_RETURN_IF(anchor_ready && anchor.size() != values, Err::invalid_argument, "the anchor has ", anchor.size(),
                    " values; the layout has ", values);
  // A fresh segment per trainer: a previous trainer that still runs cannot
  // scribble over the new one's parameters.
  auto segment = SharedSegment::create("geoloco:" + options_.job, values);
  if (!segment.ok()) return segment.status();
  if (anchor_ready) std::memcpy(segment->values().data(), anchor.data(), anchor.size_bytes());
  segment_ = std::move(*segment);
  layout_ = hello_layout_;
  fragments_.clear();
  for (const auto& f : fragments) fragments_.push_back(FragmentState{f, false});
  phase_ = anchor_ready ? Phase::training : Phase::awaiting_init;
  WelcomeMsg w{anchor_ready ? kWelcomeAnchorReady : 0u, values, {fragments.begin(), fragments.end()}, options_.plan};
  send(w, segment_.fd());
  return {};
}

Status Server::welcome(std::span<const FragmentDesc> fragments, std::span<const float> anchor) {
  return do_welcome(fragments, anchor, true);
}

Status Server::welcome_for_initial(std::span<const FragmentDesc> fragments) { return do_welcome(fragments, {}, false); }

Status Server::publish_initial(std::span<const float> anchor) {
  GEOLOCO_RETURN_IF(phase_ != Phase::init_pending, Err::invalid_argument,
                    "no INIT is waiting for an answer (now: ", phase_name(phase_), ")");
  GEOLOCO_RETURN_IF(anchor.size() != segment_.values().size(), Err::invalid_argument, "the anchor has ", anchor.size(),
                    " values; the segment has ", segment_.values().size());
  // The daemon may hand back the trainer's own parameters (the span InitEvent gave it).
  if (anchor.data() != segment_.values().data()) {
    std::memmove(segment_.values().data(), anchor.data(), anchor.size_bytes());
  }
  phase_ = Phase::training;
  std::uint64_t round = fragments_.front().desc.next_round;
  send(ResultMsg{round, kAllFragments, 0, round});
  return {};
}

Status Server::complete_sync(std::uint32_t fragment, std::span<const float> anchor, std::uint64_t next_round,
                             bool stop) {
  GEOLOCO_TRY(check_completion(fragment, fragments_, anchor.size(), next_round));
  auto& f = fragments_[fragment];
  auto dst = segment_.values().subspan(f.desc.offset, f.desc.length);
  if (anchor.data() != dst.data()) std::memmove(dst.data(), anchor.data(), anchor.size_bytes());
  std::uint64_t round = f.desc.next_round;
  f.desc.next_round = next_round;
  f.in_flight = false;
  // After the trainer that synced left, the round still advances but the
  // RESULT has no one to go to: a trainer connected since is waiting for its
  // WELCOME (with the daemon's anchor), not for this.
  if (trainer_.valid() && synced_by_[fragment] == trainer_generation_)
    send(ResultMsg{round, fragment, stop ? kResultStop : 0u, next_round});
  return {};
}

Status Server::expect_layout(const Layout& layout) {
  if (Status s = check_layout(layout); !s.ok())
    return GEOLOCO_ERROR(Err::invalid_argument, "the job's layout is invalid: ", s.message());
  if (!layout_.empty()) {
    if (Status s = compare_layouts(layout, layout_); !s.ok())
      return GEOLOCO_ERROR(Err::mismatch, "job '", options_.job, "' holds another layout already: ", s.message());
    return {};
  }
  layout_ = layout;
  if (phase_ == Phase::hello_pending) {
    if (Status s = compare_layouts(layout_, hello_layout_); !s.ok()) {
      Status why =
          GEOLOCO_ERROR(Err::mismatch, "the trainer's layout does not match job '", options_.job, "': ", s.message());
      events_.push_back(RefusalEvent{why, true});
      drop_trainer(why.code(), why.message());
    }
  }
  return {};
}

void Server::drop_trainer(Err code, const std::string& reason) {
  if (!trainer_.valid()) return;
  send(ErrorMsg{code, true, 0, kNoFragment, 0, reason});
  close_trainer(GEOLOCO_ERROR(code, reason), false);
}

}  // namespace geoloco::inner::protocol
