// The daemon's view of a job's trainer (trainer_host.h).
#include "daemon/trainer/trainer_host.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

#include "inner/protocol/layout.h"
#include "diloco/fragments.h"

namespace geoloco::daemon {

namespace protocol = inner::protocol;
using asio::use_awaitable;
using asio::experimental::as_tuple;

namespace {

// Wraps a duplicate of `fd` in an asio descriptor. The duplicate is ours:
// closing it deregisters it from the reactor before the number can be reused.
Result<std::shared_ptr<asio::posix::stream_descriptor>> watch(const asio::any_io_executor& executor, int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  GEOLOCO_RETURN_IF(copy < 0, Err::io, "cannot duplicate descriptor ", fd, ": ", std::strerror(errno));
  auto sd = std::make_shared<asio::posix::stream_descriptor>(executor);
  asio::error_code ec;
  sd->assign(copy, ec);
  if (ec) {
    ::close(copy);
    return GEOLOCO_ERROR(Err::io, "cannot watch descriptor ", fd, ": ", ec.message());
  }
  return sd;
}

ino_t inode_of(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

}  // namespace

TrainerHost::TrainerHost(const asio::any_io_executor& executor, TrainerHostOptions options)
    : executor_(executor), options_(std::move(options)), next_round_(options_.first_round), changed_(executor) {}

TrainerHost::~TrainerHost() { close(); }

Result<std::unique_ptr<TrainerHost>> TrainerHost::open(const asio::any_io_executor& executor,
                                                       TrainerHostOptions options) {
  GEOLOCO_RETURN_IF(options.fragments == 0, Err::invalid_argument, "job '", options.job,
                    "': streaming.fragments must be at least 1");
  if (!options.expected_layout.empty()) {
    // A fragment count the layout cannot honour is the job's error: say so now, not at every HELLO.
    auto cut = protocol::split_fragments(options.expected_layout, options.fragments, options.first_round);
    GEOLOCO_RETURN_IF(!cut.ok(), Err::invalid_argument, "job '", options.job, "': ", cut.status().message());
  }
  std::unique_ptr<TrainerHost> host(new TrainerHost(executor, std::move(options)));
  protocol::ServerOptions so;
  so.socket_path = host->options_.socket_path;
  so.job = host->options_.job;
  so.expected_layout = host->options_.expected_layout;
  so.check_finite = host->options_.check_finite;
  so.hello_timeout_ms = host->options_.hello_timeout_ms;
  so.plan = host->options_.plan;
  auto server = protocol::Server::open(std::move(so));
  if (!server.ok()) return server.status();
  host->server_ = std::move(*server);
  auto listen = watch(executor, host->server_->listen_fd());
  if (!listen.ok()) return listen.status();
  host->listen_sd_ = std::move(*listen);
  asio::co_spawn(executor, host->listen_loop(host->listen_sd_, host->alive_), asio::detached);
  spdlog::info("[{}] trainer: listening on {}", host->options_.job, host->options_.socket_path);
  return host;
}

void TrainerHost::close() {
  if (closed_) return;
  closed_ = true;
  // Loops wake with operation_aborted and leave without touching the host.
  *alive_ = false;
  asio::error_code ignored;
  if (listen_sd_) listen_sd_->close(ignored);
  if (trainer_sd_) trainer_sd_->close(ignored);
  if (hello_timer_) hello_timer_->cancel();
  listen_sd_.reset();
  trainer_sd_.reset();
  // The trainer sees the connection close (and stops, or retries). No ERROR
  // is sent first: a trainer that is exiting at this moment would make the
  // send fail, which the Server does not survive (see settle()).
  if (server_) {
    spdlog::info("[{}] trainer: closing the sync socket", options_.job);
    server_.reset();  // closes the trainer's connection, unmaps the segment, removes the socket file
  }
  changed_.notify_all();
}

void TrainerHost::fail(Status why) {
  spdlog::error("[{}] trainer: {}", options_.job, why.message());
  failed_ = std::move(why);
  changed_.notify_all();
}

bool TrainerHost::trainer_attached() const { return server_ && server_->trainer_fd() >= 0; }

bool TrainerHost::trainer_training() const { return server_ && server_->phase() == protocol::Phase::training; }

protocol::ServerSnapshot TrainerHost::snapshot() const {
  return server_ ? server_->snapshot() : protocol::ServerSnapshot{};
}

Status TrainerHost::waiting_error() const {
  if (!failed_.ok()) return failed_;
  GEOLOCO_RETURN_IF(closed_, Err::io, "the trainer host of job '", options_.job, "' was closed");
  return {};
}

std::span<const float> TrainerHost::current_anchor() const {
  return options_.anchor_view ? options_.anchor_view() : std::span<const float>(anchor_);
}

void TrainerHost::keep_anchor(std::span<const float> anchor) {
  // With anchor_view the engine's buffer is the anchor: no second copy.
  if (options_.anchor_view) return;
  if (anchor.data() != anchor_.data()) anchor_.assign(anchor.begin(), anchor.end());
}

std::uint64_t TrainerHost::known_values() const {
  // The Server starts from the expected layout and pins the first welcomed one.
  return server_ ? layout_values(server_->snapshot().layout) : 0;
}

// --- the engine's calls ---------------------------------------------------

Status TrainerHost::expect_layout(const Layout& layout) {
  GEOLOCO_RETURN_IF(!server_, Err::invalid_argument, "job '", options_.job, "': the sync socket is closed");
  settle();
  Status s = server_->expect_layout(layout);
  pump();
  return s;
}

Status TrainerHost::set_anchor(std::span<const float> anchor, std::uint64_t round) {
  GEOLOCO_TRY(waiting_error());
  settle();
  GEOLOCO_RETURN_IF(stopped_, Err::invalid_argument, "job '", options_.job, "' has stopped");
  const protocol::Phase phase = server_->snapshot().phase;
  GEOLOCO_RETURN_IF(phase == protocol::Phase::training || phase_count_ > 0 || phase_ready_, Err::invalid_argument,
                    "job '", options_.job, "': a trainer trains from the anchor of round ", next_round_,
                    "; the anchor changes through finish_round()");
  // A trainer asked for its initialization already holds a fragment table for next_round_.
  GEOLOCO_RETURN_IF(
      (phase == protocol::Phase::awaiting_init || phase == protocol::Phase::init_pending) && round != next_round_,
      Err::invalid_argument, "job '", options_.job, "': the attached trainer was welcomed for round ", next_round_,
      ", not ", round);
  const std::uint64_t values = known_values();
  GEOLOCO_RETURN_IF(values != 0 && anchor.size() != values, Err::invalid_argument, "job '", options_.job,
                    "': the anchor has ", anchor.size(), " values, the layout ", values);
  GEOLOCO_RETURN_IF(anchor.empty(), Err::invalid_argument, "job '", options_.job, "': the anchor is empty");
  keep_anchor(anchor);
  has_anchor_ = true;
  next_round_ = round;
  if (phase == protocol::Phase::init_pending) {
    // The trainer's initialization is not needed: answer its INIT with this anchor.
    GEOLOCO_TRY(server_->publish_initial(anchor));
    initial_ = std::vector<float>();  // frees it (`= {}` would keep the capacity)
    initial_ready_ = false;
  }
  spdlog::info("[{}] trainer: anchor of round {} set ({} values)", options_.job, round, anchor.size());
  answer_hello();
  pump();
  changed_.notify_all();
  return {};
}

asio::awaitable<Result<std::vector<float>>> TrainerHost::initial_parameters() {
  for (;;) {
    if (Status s = waiting_error(); !s.ok()) co_return s;
    if (!options_.ask_for_initial || has_anchor_) {
      Status s(Err::invalid_argument, cat("job '", options_.job, "': the trainer is not asked for its initialization (",
                                          has_anchor_ ? "the anchor is set" : "ask_for_initial is off", ")"));
      co_return s;
    }
    if (initial_ready_) {
      std::vector<float> copy = initial_;
      co_return copy;
    }
    co_await changed_.wait();
  }
}

Status TrainerHost::publish_initial(std::span<const float> anchor) {
  GEOLOCO_TRY(waiting_error());
  settle();
  GEOLOCO_RETURN_IF(has_anchor_, Err::invalid_argument, "job '", options_.job,
                    "': the anchor is already set; it changes through finish_round()");
  const std::uint64_t values = known_values();
  GEOLOCO_RETURN_IF(values != 0 && anchor.size() != values, Err::invalid_argument, "job '", options_.job,
                    "': the anchor has ", anchor.size(), " values, the layout ", values);
  GEOLOCO_RETURN_IF(initial_ready_ && anchor.size() != initial_.size(), Err::invalid_argument, "job '", options_.job,
                    "': the anchor has ", anchor.size(), " values, the trainer's initialization ", initial_.size());
  GEOLOCO_RETURN_IF(anchor.empty(), Err::invalid_argument, "job '", options_.job, "': the anchor is empty");
  if (server_->snapshot().phase == protocol::Phase::init_pending) GEOLOCO_TRY(server_->publish_initial(anchor));
  keep_anchor(anchor);  // after the Server: `anchor` may be the vector initial_parameters() returned
  has_anchor_ = true;
  initial_ = std::vector<float>();  // frees it (`= {}` would keep the capacity)
  initial_ready_ = false;
  spdlog::info("[{}] trainer: initial anchor published ({} values), first round {}", options_.job, anchor.size(),
               next_round_);
  answer_hello();
  pump();
  changed_.notify_all();
  return {};
}

asio::awaitable<Result<InnerPhase>> TrainerHost::next_phase() {
  for (;;) {
    if (Status s = waiting_error(); !s.ok()) co_return s;
    if (stopped_) {
      Status s(Err::invalid_argument, cat("job '", options_.job, "' has stopped; no phase follows"));
      co_return s;
    }
    if (phase_ready_) {
      InnerPhase phase;
      phase.round = options_.streaming ? phase_round_ : next_round_;
      phase.tokens = phase_tokens_;
      phase.loss = phase_loss_sum_ / static_cast<double>(phase_count_);
      phase.timing = phase_timing_;
      phase.replica = server_->segment_values();
      if (options_.streaming) {
        // One fragment is in flight: the replica is its range of the segment.
        const protocol::FragmentDesc d = server_->snapshot().fragments.at(phase_fragment_).desc;
        phase.fragment = phase_fragment_;
        phase.offset = d.offset;
        phase.replica = phase.replica.subspan(d.offset, d.length);
      }
      // Otherwise every fragment is in flight, and together they cover the segment.
      co_return phase;
    }
    co_await changed_.wait();
  }
}

Status TrainerHost::finish_round(std::span<const float> new_anchor, bool stop,
                                 std::optional<std::uint64_t> next_round) {
  GEOLOCO_TRY(waiting_error());
  settle();
  GEOLOCO_RETURN_IF(!phase_ready_, Err::invalid_argument, "job '", options_.job,
                    "': no inner phase is open; co_await next_phase() first");
  const std::uint64_t round = options_.streaming ? phase_round_ : next_round_;
  const std::uint64_t after = next_round.value_or(round + 1);
  GEOLOCO_RETURN_IF(after <= round, Err::invalid_argument, "job '", options_.job, "': the round after ", round,
                    " cannot be ", after);
  const protocol::ServerSnapshot snap = server_->snapshot();
  const std::uint64_t values = layout_values(snap.layout);
  GEOLOCO_RETURN_IF(new_anchor.size() != values, Err::invalid_argument, "job '", options_.job, "': the anchor has ",
                    new_anchor.size(), " values, the layout ", values);
  // The Server checks each completion before it changes anything; every
  // fragment is in flight (phase_ready_), so none of these can fail halfway.
  // After the trainer left, on_trainer_left() released them already.
  for (std::uint32_t f = 0; f < snap.fragments.size() && !phase_released_; ++f) {
    if (options_.streaming && f != phase_fragment_) continue;  // not in flight: the trainer owns it
    const protocol::FragmentDesc& d = snap.fragments[f].desc;
    GEOLOCO_TRY(server_->complete_sync(f, new_anchor.subspan(d.offset, d.length), fragment_next_round(f, after), stop));
  }
  keep_anchor(new_anchor);
  // Streaming: a dropped late fragment never moves the host back.
  next_round_ = options_.streaming ? std::max(next_round_, after) : after;
  stopped_ = stop;
  phase_ready_ = false;
  phase_released_ = false;
  phase_count_ = 0;
  phase_tokens_ = 0;
  phase_loss_sum_ = 0;
  phase_timing_.reset();
  synced_.assign(synced_.size(), false);
  ++stats_.rounds;
  spdlog::debug("[{}] trainer: round {} finished, next {}{}", options_.job, round, after, stop ? " (stop)" : "");
  answer_hello();  // a restarted trainer waited for this round to close
  pump();
  changed_.notify_all();
  return {};
}

// --- the Server's events ----------------------------------------------------

void TrainerHost::settle() {
  // Reads what the trainer sent since the loop last looked, a hang-up
  // included, before the engine's call answers it. Besides being fresher, this
  // keeps the Server from writing to a trainer that is already gone: a failed
  // send there recurses between Server::flush() and close_trainer() (reported
  // to inner/protocol; the window left is a trainer dying within this call).
  if (server_ && server_->trainer_fd() >= 0) server_->on_trainer_readable();
  pump();
}

void TrainerHost::pause() { paused_ = true; }

void TrainerHost::resume() {
  if (!std::exchange(paused_, false)) return;
  settle();
  answer_hello();  // a HELLO that came before the pause, which an anchor set meanwhile would have answered
}

void TrainerHost::pump() {
  if (!server_) return;
  // Answering an event calls the Server, which may queue more events.
  while (!paused_) {
    auto events = server_->take_events();
    if (events.empty()) break;
    for (auto& e : events) handle(e);
  }
  follow_trainer_fd();
  arm_write();
}

void TrainerHost::handle(protocol::Event& event) {
  if (auto* h = std::get_if<protocol::HelloEvent>(&event)) return on_hello(*h);
  if (auto* i = std::get_if<protocol::InitEvent>(&event)) return on_init(*i);
  if (auto* s = std::get_if<protocol::SyncEvent>(&event)) return on_sync(*s);
  if (auto* l = std::get_if<protocol::TrainerLeftEvent>(&event)) return on_trainer_left(*l);
  if (auto* r = std::get_if<protocol::RefusalEvent>(&event)) {
    // The trainer was told the same reason; the Server's state is unchanged.
    ++stats_.refusals;
    spdlog::warn("[{}] trainer: refused{}: {}", options_.job, r->fatal ? " and disconnected" : "", r->status.message());
  }
}

void TrainerHost::on_hello(const protocol::HelloEvent& hello) {
  ++stats_.hellos;
  trainer_pid_ = hello.pid;
  hello_layout_ = hello.layout;
  spdlog::info("[{}] trainer: pid {} attached ({} tensors, {} values)", options_.job, hello.pid, hello.layout.size(),
               layout_values(hello.layout));
  if (stopped_) {
    ++stats_.refusals;
    server_->drop_trainer(Err::invalid_argument, cat("job '", options_.job, "' has finished"));
    return;
  }
  answer_hello();
}

void TrainerHost::answer_hello() {
  if (!server_ || paused_) return;  // paused: resume() answers
  const protocol::ServerSnapshot snap = server_->snapshot();
  if (snap.phase != protocol::Phase::hello_pending) return;
  // The previous trainer's last round is still with the engine: the new one
  // starts from the anchor finish_round() will write.
  const bool round_open = std::any_of(snap.fragments.begin(), snap.fragments.end(),
                                      [](const protocol::FragmentState& f) { return f.in_flight; });
  if (round_open || phase_ready_) {
    spdlog::info("[{}] trainer: pid {} waits until round {} is finished", options_.job, trainer_pid_, next_round_);
    return;
  }
  if (!has_anchor_ && !options_.ask_for_initial) {
    spdlog::info("[{}] trainer: pid {} waits for the anchor", options_.job, trainer_pid_);
    return;
  }
  auto fragments = protocol::welcome_table(hello_layout_, options_.fragments, next_round_, options_.streaming);
  Status s = fragments.ok() ? Status() : fragments.status();
  if (s.ok() && has_anchor_) s = server_->welcome(*fragments, current_anchor());
  if (s.ok() && !has_anchor_) s = server_->welcome_for_initial(*fragments);
  if (!s.ok()) {
    ++stats_.refusals;
    spdlog::error("[{}] trainer: cannot welcome pid {}: {}", options_.job, trainer_pid_, s.message());
    server_->drop_trainer(s.code(), cat("the daemon cannot welcome this trainer: ", s.message()));
    return;
  }
  ++stats_.welcomes;
  synced_.assign(fragments->size(), false);
  spdlog::info("[{}] trainer: pid {} welcomed at round {} {}", options_.job, trainer_pid_, next_round_,
               has_anchor_ ? "with the anchor" : "and asked for its initialization");
}

void TrainerHost::on_init(const protocol::InitEvent& init) {
  spdlog::info("[{}] trainer: pid {} handed over its initialization ({} values)", options_.job, trainer_pid_,
               init.parameters.size());
  if (has_anchor_) {
    // set_anchor() came while the trainer was initializing: that anchor wins.
    if (Status s = server_->publish_initial(current_anchor()); !s.ok())
      spdlog::error("[{}] trainer: cannot answer INIT: {}", options_.job, s.message());
    return;
  }
  initial_.assign(init.parameters.begin(), init.parameters.end());
  initial_ready_ = true;
  changed_.notify_all();
}

std::uint64_t TrainerHost::fragment_next_round(std::uint32_t fragment, std::uint64_t after) const {
  return options_.streaming ? diloco::next_round_of_fragment(fragment, after, options_.fragments) : after;
}

void TrainerHost::on_streaming_sync(const protocol::SyncEvent& sync) {
  const protocol::SyncMsg& m = sync.sync;
  if (phase_ready_) {
    // A trainer waits for its RESULT before its next SYNC (one fragment in
    // flight); one that does not gets this fragment back unchanged, dropped.
    spdlog::warn("[{}] trainer: SYNC of round {} fragment {} while round {} fragment {} is open; dropped", options_.job,
                 m.round, m.fragment, phase_round_, phase_fragment_);
    const protocol::FragmentDesc d = server_->snapshot().fragments.at(m.fragment).desc;
    if (Status s = server_->complete_sync(m.fragment, current_anchor().subspan(d.offset, d.length),
                                          fragment_next_round(m.fragment, std::max(m.round + 1, next_round_)), false);
        !s.ok())
      spdlog::error("[{}] trainer: cannot drop fragment {}: {}", options_.job, m.fragment, s.message());
    return;
  }
  phase_round_ = m.round;
  phase_fragment_ = m.fragment;
  phase_tokens_ = m.tokens;
  phase_loss_sum_ = m.loss;
  phase_timing_ = m.timing;
  phase_count_ = 1;
  phase_ready_ = true;
  spdlog::debug("[{}] trainer: SYNC round {} fragment {} tokens {} loss {:.4f}", options_.job, m.round, m.fragment,
                m.tokens, m.loss);
  changed_.notify_all();
}

void TrainerHost::on_sync(const protocol::SyncEvent& sync) {
  const protocol::SyncMsg& m = sync.sync;
  ++stats_.syncs;
  if (options_.streaming) return on_streaming_sync(sync);
  // The Server checked the round against the table we welcomed with, which
  // holds next_round_ for every fragment.
  if (m.round != next_round_ || m.fragment >= synced_.size() || synced_[m.fragment]) {
    spdlog::error("[{}] trainer: internal: SYNC round {} fragment {} while collecting round {}", options_.job, m.round,
                  m.fragment, next_round_);
    return;
  }
  synced_[m.fragment] = true;
  phase_tokens_ = std::max(phase_tokens_, m.tokens);
  phase_loss_sum_ += m.loss;
  if (m.timing) phase_timing_ = m.timing;
  ++phase_count_;
  spdlog::debug("[{}] trainer: SYNC round {} fragment {} tokens {} loss {:.4f}", options_.job, m.round, m.fragment,
                m.tokens, m.loss);
  if (phase_count_ == synced_.size()) {
    phase_ready_ = true;
    changed_.notify_all();
  }
}

void TrainerHost::on_trainer_left(const protocol::TrainerLeftEvent& left) {
  ++stats_.departures;
  if (stopped_) spdlog::info("[{}] trainer: pid {} left after the job stopped", options_.job, trainer_pid_);
  else
    spdlog::warn("[{}] trainer: pid {} left during round {}: {}", options_.job, trainer_pid_, next_round_,
                 left.reason.message());
  trainer_pid_ = -1;
  if (phase_count_ == 0) return;
  // Fragments in flight belong to the trainer that left; release them now,
  // while nobody is attached: the Server sends a completion's RESULT to
  // whichever trainer is connected, and a RESULT before its WELCOME would
  // break the next one. (listen_loop() settles a hang-up before accepting, so
  // the next trainer is not attached yet; should one be, it is asked to
  // reconnect.)
  if (server_->trainer_fd() >= 0)
    server_->drop_trainer(Err::io, "the daemon was releasing the previous trainer's round; connect again");
  const protocol::ServerSnapshot snap = server_->snapshot();
  const auto segment = server_->segment_values();
  // A complete round is kept for the engine: each fragment is "completed"
  // with its own replica values (nothing moves), so the replica stays as it
  // is in the segment, which the next welcome() replaces only after
  // finish_round(). Some fragments only: a replica mixed from two trainers
  // is no replica; they get the anchor back and the next trainer redoes the round.
  const std::span<const float> values = phase_ready_ ? std::span<const float>(segment) : current_anchor();
  for (std::uint32_t f = 0; f < snap.fragments.size(); ++f) {
    if (!snap.fragments[f].in_flight) continue;
    const protocol::FragmentDesc& d = snap.fragments[f].desc;
    const std::uint64_t after = (options_.streaming ? phase_round_ : next_round_) + 1;
    if (Status s = server_->complete_sync(f, values.subspan(d.offset, d.length), fragment_next_round(f, after), false);
        !s.ok())
      spdlog::error("[{}] trainer: cannot release fragment {}: {}", options_.job, f, s.message());
  }
  if (phase_ready_) {
    phase_released_ = true;
    return;
  }
  ++stats_.discarded_partial_rounds;
  spdlog::warn("[{}] trainer: round {} discarded: {} of {} fragments had synced; the next trainer redoes it",
               options_.job, next_round_, phase_count_, synced_.size());
  phase_count_ = 0;
  phase_tokens_ = 0;
  phase_loss_sum_ = 0;
  phase_timing_.reset();
  synced_.assign(synced_.size(), false);
}

// --- descriptors -----------------------------------------------------------

void TrainerHost::follow_trainer_fd() {
  const int fd = server_ ? server_->trainer_fd() : -1;
  const ino_t ino = fd >= 0 ? inode_of(fd) : 0;
  if (trainer_sd_ && fd >= 0 && ino == trainer_ino_) return;  // the same trainer
  if (!trainer_sd_ && fd < 0) return;
  if (trainer_sd_) {
    // Deregisters and closes our duplicate; the pending waits end aborted.
    asio::error_code ignored;
    trainer_sd_->close(ignored);
    trainer_sd_.reset();
  }
  ++generation_;
  write_armed_ = false;
  trainer_ino_ = 0;
  if (fd < 0) return;
  auto sd = watch(executor_, fd);
  if (!sd.ok()) {
    ++stats_.refusals;
    spdlog::error("[{}] trainer: {}", options_.job, sd.status().message());
    server_->drop_trainer(Err::io, "the daemon cannot serve another connection now");
    if (!paused_)  // else taken once resumed
      for (auto& e : server_->take_events()) handle(e);
    return;
  }
  trainer_sd_ = std::move(*sd);
  trainer_ino_ = ino;
  asio::co_spawn(executor_, read_loop(trainer_sd_, generation_, alive_), asio::detached);
  asio::co_spawn(executor_, hello_watch(generation_, alive_), asio::detached);
}

asio::awaitable<void> TrainerHost::hello_watch(std::uint64_t generation, std::shared_ptr<bool> alive) {
  const auto deadline = server_->hello_deadline();
  if (!deadline) co_return;
  if (!hello_timer_) hello_timer_.emplace(executor_);
  hello_timer_->expires_at(*deadline);
  co_await hello_timer_->async_wait(as_tuple(use_awaitable));
  if (!*alive || generation != generation_) co_return;  // closed, or another connection since
  server_->on_hello_deadline(std::chrono::steady_clock::now());
  pump();
}

void TrainerHost::arm_write() {
  if (!server_ || !trainer_sd_ || write_armed_ || !server_->wants_write()) return;
  write_armed_ = true;
  asio::co_spawn(executor_, write_wait(trainer_sd_, generation_, alive_), asio::detached);
}

asio::awaitable<void> TrainerHost::listen_loop(std::shared_ptr<Descriptor> listen, std::shared_ptr<bool> alive) {
  for (;;) {
    auto [ec] = co_await listen->async_wait(Descriptor::wait_read, as_tuple(use_awaitable));
    if (!*alive) co_return;  // the host is closed or gone: touch nothing of it
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      Status s(Err::io, cat("job '", options_.job, "': the sync socket failed: ", ec.message()));
      fail(s);
      co_return;
    }
    // A trainer's hang-up first, then the next connection: see on_trainer_left().
    settle();
    server_->on_listen_readable();
    pump();
  }
}

asio::awaitable<void> TrainerHost::read_loop(std::shared_ptr<Descriptor> trainer, std::uint64_t generation,
                                             std::shared_ptr<bool> alive) {
  for (;;) {
    auto [ec] = co_await trainer->async_wait(Descriptor::wait_read, as_tuple(use_awaitable));
    if (!*alive || generation != generation_ || ec == asio::error::operation_aborted) co_return;
    // Other errors (a reset connection) are the Server's to find when it reads.
    server_->on_trainer_readable();
    pump();
    if (generation != generation_) co_return;
  }
}

asio::awaitable<void> TrainerHost::write_wait(std::shared_ptr<Descriptor> trainer, std::uint64_t generation,
                                              std::shared_ptr<bool> alive) {
  auto [ec] = co_await trainer->async_wait(Descriptor::wait_write, as_tuple(use_awaitable));
  if (!*alive || generation != generation_ || ec == asio::error::operation_aborted) co_return;
  write_armed_ = false;
  server_->on_trainer_writable();
  pump();
}

}  // namespace geoloco::daemon
