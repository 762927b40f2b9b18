// Test helpers (test_daemon.h).
#include "inner/protocol/tests/test_daemon.h"

#include <poll.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "inner/protocol/layout.h"
#include "diloco/fragments.h"

namespace geoloco::inner::protocol::testing {

std::string temp_socket_path(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "/tmp/geoloco-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".sock";
}

FakeDaemon::FakeDaemon(std::unique_ptr<Server> server, FakeDaemonConfig config)
    : server_(std::move(server)), config_(std::move(config)), anchor_(config_.anchor) {
  snapshot_ = server_->snapshot();
  thread_ = std::thread([this] { run(); });
}

FakeDaemon::~FakeDaemon() { stop(); }

void FakeDaemon::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void FakeDaemon::run() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.deadline_ms);
  while (!stop_ && std::chrono::steady_clock::now() < deadline) {
    pollfd fds[2] = {{server_->listen_fd(), POLLIN, 0}, {server_->trainer_fd(), POLLIN, 0}};
    if (server_->wants_write()) fds[1].events |= POLLOUT;
    int n = ::poll(fds, server_->trainer_fd() >= 0 ? 2 : 1, 10);
    if (n > 0) {
      if (fds[0].revents & POLLIN) server_->on_listen_readable();
      if (server_->trainer_fd() >= 0 && (fds[1].revents & POLLOUT)) server_->on_trainer_writable();
      if (server_->trainer_fd() >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) server_->on_trainer_readable();
    }
    for (auto& e : server_->take_events()) handle(e);
    std::lock_guard lock(mu_);
    snapshot_ = server_->snapshot();
  }
}

void FakeDaemon::handle(Event& event) {
  std::lock_guard lock(mu_);
  if (auto* h = std::get_if<HelloEvent>(&event)) {
    ++hellos_;
    auto fragments = split_fragments(h->layout, config_.fragments, 0);
    if (!fragments.ok()) return failures_.push_back(fragments.status());
    if (config_.streaming)
      for (std::uint32_t f = 0; f < fragments->size(); ++f)
        (*fragments)[f].next_round = diloco::next_round_of_fragment(f, config_.first_round, config_.fragments);
    // A restarted trainer continues at the rounds the daemon is at.
    for (std::size_t f = 0; f < snapshot_.fragments.size() && f < fragments->size(); ++f)
      (*fragments)[f].next_round = snapshot_.fragments[f].desc.next_round;
    Status s = anchor_.empty() ? server_->welcome_for_initial(*fragments) : server_->welcome(*fragments, anchor_);
    if (!s.ok()) failures_.push_back(s);
  } else if (auto* i = std::get_if<InitEvent>(&event)) {
    ++inits_;
    anchor_.assign(i->parameters.begin(), i->parameters.end());
    for (auto& v : anchor_) v += config_.init_shift;
    if (Status p = server_->publish_initial(anchor_); !p.ok()) failures_.push_back(p);
  } else if (auto* s = std::get_if<SyncEvent>(&event)) {
    const FragmentDesc desc = server_->snapshot().fragments.at(s->sync.fragment).desc;
    SyncRecord rec{s->sync, {s->replica.begin(), s->replica.end()}, {}};
    for (std::size_t k = 0; k < desc.length; ++k) {
      float& a = anchor_[desc.offset + k];
      a = a - config_.eta * (a - rec.replica[k]);
    }
    rec.anchor_after.assign(anchor_.begin() + static_cast<std::ptrdiff_t>(desc.offset),
                            anchor_.begin() + static_cast<std::ptrdiff_t>(desc.offset + desc.length));
    const std::uint64_t next = s->sync.round + (config_.streaming ? config_.fragments : 1);
    Status done =
        server_->complete_sync(s->sync.fragment, rec.anchor_after, next, s->sync.round >= config_.stop_after_round);
    if (!done.ok()) failures_.push_back(done);
    syncs_.push_back(std::move(rec));
  } else if (auto* l = std::get_if<TrainerLeftEvent>(&event)) {
    departures_.push_back(l->reason);
  } else if (auto* r = std::get_if<RefusalEvent>(&event)) {
    refusals_.push_back(r->status);
  }
}

std::vector<SyncRecord> FakeDaemon::syncs() const {
  std::lock_guard lock(mu_);
  return syncs_;
}
std::vector<Status> FakeDaemon::refusals() const {
  std::lock_guard lock(mu_);
  return refusals_;
}
std::vector<Status> FakeDaemon::failures() const {
  std::lock_guard lock(mu_);
  return failures_;
}
std::vector<Status> FakeDaemon::departures() const {
  std::lock_guard lock(mu_);
  return departures_;
}
int FakeDaemon::hellos() const {
  std::lock_guard lock(mu_);
  return hellos_;
}
int FakeDaemon::inits() const {
  std::lock_guard lock(mu_);
  return inits_;
}
std::vector<float> FakeDaemon::anchor() const {
  std::lock_guard lock(mu_);
  return anchor_;
}
ServerSnapshot FakeDaemon::snapshot() const {
  std::lock_guard lock(mu_);
  return snapshot_;
}

RawTrainer::RawTrainer(const std::string& path) {
  auto fd = connect_unix(path, 2000);
  REQUIRE(fd.ok());
  fd_ = std::move(*fd);
}

void RawTrainer::send(std::span<const std::byte> bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    auto n = send_some(fd_.get(), bytes.subspan(sent));
    REQUIRE(n.ok());
    sent += *n;
  }
}

void RawTrainer::send(const Message& message) {
  auto bytes = encode(message);
  REQUIRE(bytes.ok());
  send(*bytes);
}

std::optional<Message> RawTrainer::read(Server& server, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::array<std::byte, 4096> chunk;
  for (;;) {
    auto raw = inbox_.next();
    REQUIRE(raw.ok());
    if (raw->has_value()) {
      auto m = decode_body((*raw)->header.type, (*raw)->body);
      REQUIRE(m.ok());
      return *m;
    }
    pump(server);
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 5) > 0) {
      auto n = recv_some(fd_.get(), chunk, &fds);
      REQUIRE(n.ok());
      if (n->has_value()) {
        if (**n == 0) return std::nullopt;
        inbox_.append(std::span(chunk.data(), **n));
      }
    }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  }
}

void pump(Server& server) {
  server.on_listen_readable();
  server.on_trainer_readable();
  if (server.wants_write()) server.on_trainer_writable();
}

}  // namespace geoloco::inner::protocol::testing
