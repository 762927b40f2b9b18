#include "daemon/job_run.h"

#include "common/overload.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>

#include "common/digest.h"
#include "daemon/job_trainer.h"
#include "daemon/job_util.h"

namespace geoloco::daemon {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using asio::use_awaitable;
using asio::experimental::as_tuple;

namespace {

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(as_tuple(use_awaitable));
}

// Which messages a coordinator site hands to its coordinator role rather
// than to its own participant: what sites say to the coordinator, and a
// participant's failure report (an ABORT from a peer; from this site, one
// whose reason says "failure: ", since the role's own ABORTs come here too).
bool for_coordinator(const ControlMessage& m, bool from_self) {
  return std::visit(Overload{[](const JoinMessage&) { return true; }, [](const HeartbeatMessage&) { return true; },
                             [](const ReadyMessage&) { return true; }, [](const CommitMessage&) { return true; },
                             [&](const AbortMessage& a) { return !from_self || a.reason.rfind("failure: ", 0) == 0; },
                             [](const auto&) { return false; }},
                    m);
}

}  // namespace

std::string_view job_state_name(JobState s) {
  switch (s) {
    case JobState::starting: return "starting";
    case JobState::running: return "running";
    case JobState::finished: return "finished";
    case JobState::failed: return "failed";
    case JobState::cancelled: return "cancelled";
    case JobState::stopped: return "stopped";
  }
  return "unknown";
}

Result<JobState> parse_job_state(std::string_view name) {
  for (auto s : {JobState::starting, JobState::running, JobState::finished, JobState::failed, JobState::cancelled,
                 JobState::stopped})
    if (job_state_name(s) == name) return s;
  return GEOLOCO_ERROR(Err::invalid_argument, "unknown job state '", name, "'");
}

std::vector<outer::TensorInfo> outer_layout(const inner::protocol::Layout& layout, std::uint64_t values) {
  std::vector<outer::TensorInfo> out;
  for (const auto& t : layout) out.push_back({t.name, t.shape});
  if (out.empty()) out.push_back({"parameters", {values}});
  return out;
}

std::uint64_t job_id_of(const std::string& name) {
  const std::uint64_t id = xxh3_64(std::as_bytes(std::span<const char>(name)));
  return id == 0 ? 1 : id;
}

Result<std::shared_ptr<JobRun>> JobRun::create(JobEnvironment env, JobSpec spec, std::string yaml, std::string file) {
  GEOLOCO_RETURN_IF(!contains(spec.sites, env.site.name), Err::invalid_argument, "job '", spec.name,
                    "' does not name this site (", env.site.name, ")");
  const std::string dir = (fs::path(env.site.data_dir) / "jobs" / spec.name).string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot create the job folder ", dir, ": ", ec.message());
  std::shared_ptr<JobRun> job(new JobRun(std::move(env), std::move(spec), std::move(yaml), std::move(file), dir));
  GEOLOCO_TRY(job->load_checkpoint());
  {
    std::ofstream out(fs::path(dir) / "job.yaml", std::ios::trunc);
    out << job->yaml_;
    GEOLOCO_RETURN_IF(!out.good(), Err::io, "cannot write ", dir, "/job.yaml");
  }
  job->persist_state();
  return job;
}

JobRun::JobRun(JobEnvironment env, JobSpec spec, std::string yaml, std::string file, std::string dir)
    : env_(std::move(env)),
      spec_(std::move(spec)),
      yaml_(std::move(yaml)),
      file_(std::move(file)),
      dir_(std::move(dir)),
      id_(job_id_of(spec_.name)),
      config_hash_(digest_hex(xxh3_64(std::as_bytes(std::span<const char>(yaml_))))),
      changed_(env_.executor) {}

JobRun::~JobRun() = default;

bool JobRun::done() const {
  return job_state_ == JobState::finished || job_state_ == JobState::failed || job_state_ == JobState::cancelled ||
         job_state_ == JobState::stopped;
}

void JobRun::note(const std::string& line) { spdlog::info("[{}] {}", spec_.name, line); }

void JobRun::set_state(JobState state, const std::string& message) {
  job_state_ = state;
  message_ = message;
  persist_state();
  changed_.notify_all();
}

void JobRun::persist_state() const {
  const fs::path path = fs::path(dir_) / "status.json";
  const fs::path tmp = fs::path(dir_) / "status.json.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"state", job_state_name(job_state_)}, {"file", file_}, {"message", message_}}.dump() << "\n";
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
}

// ---------------------------------------------------------------- messages

void JobRun::send(const std::string& site, const ControlMessage& message) {
  if (site == self()) {
    // Local delivery, after the current handler returns (no re-entrance).
    asio::post(env_.executor, [self = shared_from_this(), message] {
      if (self->done()) return;
      if (self->role_ && for_coordinator(message, /*from_self=*/true)) self->role_->on_message(self->self(), message);
      else self->handle_for_participant(self->self(), message);
    });
    return;
  }
  send_frame(site, control_header(), encode_control(message));
}

transport::FrameHeader JobRun::control_header() const {
  transport::FrameHeader h;
  h.type = transport::FrameType::control;
  h.job = id_;
  h.round = state_.round;
  return h;
}

void JobRun::send_now(const std::string& site, const ControlMessage& message) {
  asio::co_spawn(
      env_.executor,
      [keep = shared_from_this(), site, h = control_header(), text = encode_control(message)]() -> asio::awaitable<void> {
        Status sent = co_await keep->env_.mesh->send_control_frame(site, h, std::as_bytes(std::span<const char>(text)));
        if (!sent.ok()) spdlog::info("[{}] a STATE_SYNC message to {} was lost: {}", keep->spec_.name, site, sent.message());
      },
      asio::detached);
}

void JobRun::send_frame(const std::string& site, transport::FrameHeader header, std::string payload) {
  auto& box = outboxes_[site];
  if (box.frames.size() > 1024) box.frames.pop_front();  // a long-dead peer: keep the newest
  box.frames.emplace_back(header, std::move(payload));
  if (!box.draining) {
    box.draining = true;
    asio::co_spawn(env_.executor, drain(site), asio::detached);
  }
}

asio::awaitable<void> JobRun::drain(std::string site) {
  auto keep = shared_from_this();
  auto& box = outboxes_[site];
  while (!box.frames.empty()) {
    auto [header, payload] = box.frames.front();
    box.frames.pop_front();
    Status sent;
    for (int attempt = 0; attempt < 5; ++attempt) {
      sent = co_await env_.mesh->send_control_frame(site, header, std::as_bytes(std::span<const char>(payload)));
      if (sent.ok()) break;
      co_await sleep_for(std::chrono::milliseconds(200 * (attempt + 1)));
    }
    if (!sent.ok()) spdlog::debug("[{}] a control message to {} was lost: {}", spec_.name, site, sent.message());
  }
  box.draining = false;
}

Status JobRun::on_frame(const std::string& peer, const transport::FrameHeader& header,
                        std::span<const std::byte> payload) {
  if (done()) {
    // The job ended here. A site that comes back late still gets the final
    // state, and then the final COMMITTED, so it ends the job too.
    if (header.type != transport::FrameType::control || job_state_ != JobState::finished) return {};
    auto message = decode_control(std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
    if (message.ok() && std::holds_alternative<StateRequestMessage>(*message)) {
      on_state_request(peer);
      send(peer, CommittedMessage{state_.round, digest_hex(state_.anchor_digest()), true});
    }
    if (message.ok() && std::holds_alternative<StateAcceptMessage>(*message))
      on_state_accept(peer, std::get<StateAcceptMessage>(*message));
    return {};
  }
  if (header.type == transport::FrameType::state) {
    if (!receiving_ || peer != receiving_->peer()) {
      // The rest of a transfer this site no longer wants (an answer to an
      // earlier request, or from another peer): dropped, nothing changes.
      // Not refused: the frame is authentic, and closing the connection
      // would cut the heartbeats that share it.
      spdlog::debug("[{}] state frame {} from {} dropped: no transfer from it in progress", spec_.name, header.chunk,
                    peer);
      return {};
    }
    Status added = receiving_->add(peer, header, payload);
    if (!added.ok()) {
      // Two transfers from the same peer interleaved, or a broken one: this
      // one is void (the digest would have caught it); the site asks again.
      spdlog::warn("[{}] state transfer from {} abandoned: {}", spec_.name, peer, added.message());
      receiving_.reset();
      return {};
    }
    state_progress_at_ = Clock::now();
    if (receiving_->complete()) {
      Status ok = receiving_->verify();
      if (ok.ok()) install_state(*receiving_);
      else spdlog::warn("[{}] {}", spec_.name, ok.message());
      receiving_.reset();
    }
    return {};
  }
  auto message = decode_control(std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
  if (!message.ok()) return message.status();
  if (role_ && for_coordinator(*message, /*from_self=*/false)) role_->on_message(peer, *message);
  else handle_for_participant(peer, *message);
  return {};
}

void JobRun::handle_for_participant(const std::string& from, const ControlMessage& message) {
  if (done()) return;
  const bool from_coordinator = from == spec_.coordinator;
  std::visit(Overload{[&](const PlanMessage& m) {
                        if (from_coordinator) on_plan(m);
                      },
                      [&](const CommittedMessage& m) {
                        if (from_coordinator) on_committed(m);
                      },
                      [&](const AbortMessage& m) {
                        if (from_coordinator) on_abort(m);
                      },
                      [&](const StateRequestMessage&) { on_state_request(from); },
                      [&](const StateOfferMessage& m) { on_state_offer(from, m); },
                      [&](const StateAcceptMessage& m) { on_state_accept(from, m); },
                      [&](const auto& m) {
                        spdlog::warn("[{}] {} sent {}, which only the coordinator takes", spec_.name, from,
                                     control_type_name(ControlMessage(m)));
                      }},
             message);
  maybe_ready();
  changed_.notify_all();
}

// ------------------------------------------------------------------ engine

Status JobRun::start() {
  TrainerHostOptions h;
  h.socket_path = sync_socket_path(dir_);
  h.job = spec_.name;
  h.fragments = spec_.fragments();
  h.streaming = streaming();
  h.first_round = state_.round + 1;
  h.anchor_view = [this] { return trainer_anchor(); };  // no second copy of the model in the host
  // Only the coordinator's trainer may supply the job's initialization, and
  // only when nothing was ever committed; every other site waits for the
  // anchor (STATE_SYNC from the coordinator).
  if (is_coordinator()) {
    auto role = CoordinatorRole::open(
        env_.executor, spec_, Millis(env_.site.heartbeat_timeout_ms), (fs::path(dir_) / "journal").string(),
        [this](const std::string& site, const ControlMessage& m) { send(site, m); },
        [this](const std::string& line) {
          note(line);
          // A paused job says so in `geoloco status` too.
          if (line.rfind("paused:", 0) == 0 && job_state_ == JobState::running) {
            message_ = line;
            changed_.notify_all();
          }
        });
    if (!role.ok()) return role.status();
    role_ = std::move(*role);
    known_committed_ = role_->committed_round();
  }
  h.ask_for_initial = is_coordinator() && known_committed_ == 0 && !have_state_;
  auto host = TrainerHost::open(env_.executor, h);
  if (!host.ok()) return host.status();
  host_ = std::move(*host);

  if (spec_.trainer.kind == TrainerSpec::Kind::builtin) {
    TrainerPaths paths;
    paths.program = env_.trainer_program;
    paths.job_dir = dir_;
    paths.gpus = env_.site.gpus;
    auto options = builtin_trainer_options(spec_, self(), paths);
    if (!options.ok()) return options.status();
    std::weak_ptr<JobRun> weak = weak_from_this();
    options->on_give_up = [weak](const Status& why) {
      if (auto job = weak.lock(); job && job->host_) job->host_->fail(why);
    };
    auto process = TrainerProcess::start(env_.executor, std::move(*options));
    if (!process.ok()) return process.status();
    process_ = std::move(*process);
  }
  asio::co_spawn(env_.executor, run(), asio::detached);
  return {};
}

asio::awaitable<void> JobRun::run() {
  auto keep = shared_from_this();
  if (role_) asio::co_spawn(env_.executor, [keep]() -> asio::awaitable<void> { co_await keep->role_->run(); },
                            asio::detached);
  asio::co_spawn(env_.executor, heartbeats(), asio::detached);
  send(spec_.coordinator, JoinMessage{spec_.name, have_state_ ? state_.round : 0,
                                      have_state_ ? digest_hex(state_.anchor_digest()) : std::string()});

  // Where the anchor comes from.
  if (is_coordinator() && known_committed_ == 0 && !have_state_) {
    note("waiting for the trainer's initial parameters");
    auto initial = co_await host_->initial_parameters();
    if (done()) co_return;
    if (!initial.ok()) {
      set_state(JobState::failed, cat("no initial parameters: ", initial.status().message()));
      co_return;
    }
    auto created = outer::OuterState::create(spec_.name, outer_layout(host_->snapshot().layout, initial->size()),
                                             std::move(*initial));
    if (!created.ok()) {
      set_state(JobState::failed, created.status().message());
      co_return;
    }
    state_ = std::move(*created);
    have_state_ = true;
    if (Status p = host_->publish_initial(state_.anchor); !p.ok()) {
      set_state(JobState::failed, p.message());
      co_return;
    }
    note(cat("initial anchor from the trainer: ", state_.anchor.size(), " parameters, digest ",
             digest_hex(state_.anchor_digest())));
  } else if (!is_coordinator() || !have_state_ || state_.round != known_committed_) {
    // A joining site, or a coordinator whose checkpoint is older than its journal.
    need_state_ = true;
    request_state();
    while (need_state_ && !done()) {
      co_await sleep_for(std::chrono::milliseconds(500));
      // Asked again after a second of silence, not while a transfer is coming in
      // (another request would start the whole transfer over).
      if (need_state_ && Clock::now() - std::max(state_requested_at_, state_progress_at_) > std::chrono::seconds(1))
        request_state();
    }
    if (done()) co_return;
  } else {
    if (Status s = host_->set_anchor(state_.anchor, state_.round + 1); !s.ok()) {
      set_state(JobState::failed, s.message());
      co_return;
    }
    note(cat("resumed from the checkpoint of round ", state_.round));
  }
  if (!feedback_ && compression::uses_error_feedback(spec_.compression)) {
    feedback_ = std::make_unique<compression::ErrorFeedback>(state_.anchor.size());
  }
  set_state(JobState::running, cat("round ", state_.round + 1));
  phase_started_ = Clock::now();
  co_await watch_trainer();
}

asio::awaitable<void> JobRun::watch_trainer() {
  auto keep = shared_from_this();
  while (!done()) {
    auto phase = co_await host_->next_phase();
    if (done()) co_return;
    // After the job's last round the trainer was told to stop: no phase follows.
    if (!phase.ok() && (final_seen_ || stopping_ || trainer_told_stop_)) co_return;
    if (!phase.ok()) {
      co_await stop(JobState::failed, cat("the trainer failed: ", phase.status().message()));
      co_return;
    }
    phase_ = *phase;
    phase_at_ = Clock::now();
    maybe_ready();
    while (phase_ && !done()) co_await changed_.wait();
  }
}

asio::awaitable<void> JobRun::heartbeats() {
  auto keep = shared_from_this();
  const auto interval = std::chrono::milliseconds(env_.site.heartbeat_interval_ms);
  while (!done()) {
    const char* phase = step_ == Step::exchanging ? "exchange" : phase_ ? "ready" : have_state_ ? "inner" : "idle";
    send(spec_.coordinator, HeartbeatMessage{state_.round + 1, phase});
    if (step_ == Step::committing && plan_participant_) send(spec_.coordinator, CommitMessage{plan_.round, pending_digest_});
    maybe_ready();
    co_await sleep_for(interval);
  }
}

void JobRun::maybe_ready() {
  if (!have_state_ || done() || need_state_ || step_ != Step::idle || !phase_) return;
  const std::uint64_t round = state_.round + 1;
  if (phase_->round > round) {
    // The trainer is ahead of our state: we missed commits.
    need_state_ = true;
    request_state();
    return;
  }
  const std::uint64_t late = round - phase_->round;
  const auto& straggler = spec_.outer.straggler;
  if (late > 0 && streaming()) {
    // Round `round` syncs another fragment: this one can join no round.
    note(cat("dropped this site's late fragment ", phase_->fragment, " of round ", phase_->round, ": ",
             phase_->tokens, " tokens (", late, " round(s) late; with streaming a late fragment is always dropped)"));
    if (env_.metrics) (void)env_.metrics->add("geoloco_dropped_tokens_total", {{"job", spec_.name}}, double(phase_->tokens));
    release_phase(false);
    return;
  }
  if ((late > 0 && straggler.policy == outer::StragglerPolicy::drop) || late > straggler.max_rounds_late) {
    note(cat("dropped this site's late work: ", phase_->tokens, " tokens trained from the anchor of round ",
             phase_->round, " (", late, " round(s) late, policy ",
             straggler.policy == outer::StragglerPolicy::drop ? "drop" : "carry", ")"));
    if (env_.metrics) (void)env_.metrics->add("geoloco_dropped_tokens_total", {{"job", spec_.name}}, double(phase_->tokens));
    release_phase(false);
    return;
  }
  const auto now = Clock::now();
  if (ready_sent_round_ == round && now - ready_sent_at_ < std::chrono::milliseconds(env_.site.heartbeat_interval_ms))
    return;
  if (ready_sent_round_ != round && late > 0)
    note(cat("late work joins round ", round, ": trained from the anchor of round ", phase_->round));
  ready_sent_round_ = round;
  ready_sent_at_ = now;
  const double loss = std::isfinite(phase_->loss) ? phase_->loss : 0.0;
  send(spec_.coordinator, ReadyMessage{round, phase_->round, std::max<std::uint64_t>(phase_->tokens, 1),
                                       spec_.outer.inner.steps, loss});
}

void JobRun::release_phase(bool stop) {
  if (!phase_) return;
  // A phase trained from a newer anchor than our state (only at the job's
  // end, for a site that just caught up) still needs a later next round.
  Status s = host_->finish_round(state_.anchor, stop, std::max(state_.round + 1, phase_->round + 1));
  if (s.ok() && stop) trainer_told_stop_ = true;
  late_anchor_.clear();  // the trainer continues from state_.anchor
  late_anchor_.shrink_to_fit();
  if (!s.ok()) spdlog::warn("[{}] finish_round: {}", spec_.name, s.message());
  phase_.reset();
  phase_started_ = Clock::now();
  changed_.notify_all();
}

asio::awaitable<void> JobRun::finish_job() {
  auto keep = shared_from_this();
  if (stopping_) co_return;
  stopping_ = true;
  note(cat("job finished after round ", state_.round));
  if (phase_) release_phase(true);
  if (process_) {
    // A trainer that got stop with its RESULT exits on its own; one still
    // training (a straggler's) is stopped now: its work can join no round.
    for (int i = 0; i < 100 && trainer_told_stop_ && process_->state() == TrainerProcess::State::running; ++i)
      co_await sleep_for(std::chrono::milliseconds(100));
    co_await process_->stop();
  }
  if (role_) role_->stop();
  if (Status s = save_checkpoint(); !s.ok()) spdlog::error("[{}] final checkpoint: {}", spec_.name, s.message());
  host_->close();
  set_state(JobState::finished, cat("finished after round ", state_.round, "; checkpoint ",
                                    (fs::path(dir_) / "checkpoint.safetensors").string()));
}

asio::awaitable<void> JobRun::stop(JobState final_state, std::string reason) {
  auto keep = shared_from_this();
  if (done()) co_return;
  stopping_ = true;
  note(cat("stopping: ", reason));
  if (role_) role_->stop();
  if (process_) co_await process_->stop();
  if (host_) host_->close();
  if (have_state_ && !need_state_) {
    if (Status s = save_checkpoint(); !s.ok()) spdlog::error("[{}] checkpoint: {}", spec_.name, s.message());
  }
  set_state(final_state, reason);
}

}  // namespace geoloco::daemon
