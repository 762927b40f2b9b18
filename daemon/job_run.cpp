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
#include <utility>

#include "common/digest.h"
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

// The completion of a job coroutine: an exception that escapes one is a bug;
// say so loudly rather than let it vanish (asio::detached drops it).
auto logged(const char* what) {
  return [what](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      spdlog::critical("internal: {} stopped: {}", what, x.what());
    }
  };
}

JobEnd end_of(JobState s) {
  switch (s) {
    case JobState::cancelled:
      return JobEnd::cancelled;
    case JobState::failed:
      return JobEnd::failed;
    case JobState::finished:
      return JobEnd::finished;
    default:
      return JobEnd::stopped;
  }
}

JobState state_of(JobEnd e) {
  switch (e) {
    case JobEnd::finished:
      return JobState::finished;
    case JobEnd::cancelled:
      return JobState::cancelled;
    case JobEnd::failed:
      return JobState::failed;
    case JobEnd::stopped:
      return JobState::stopped;
  }
  return JobState::failed;
}

}  // namespace

std::uint64_t job_id_of(const std::string& name) {
  const std::uint64_t id = xxh3_64(std::as_bytes(std::span<const char>(name)));
  return id == 0 ? 1 : id;
}

Result<std::shared_ptr<JobRun>> JobRun::create(JobEnvironment env, job::JobSpec spec, std::string yaml,
                                               std::string file) {
  GEOLOCO_RETURN_IF(!contains(spec.sites, env.site.name), Err::invalid_argument, "job '", spec.name,
                    "' does not name this site (", env.site.name, ")");
  const std::string dir = (fs::path(env.site.data_dir) / "jobs" / spec.name).string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot create the job folder ", dir, ": ", ec.message());
  std::shared_ptr<JobRun> job(new JobRun(std::move(env), std::move(spec), std::move(yaml), std::move(file), dir));
  GEOLOCO_TRY(job->load_checkpoint());
  auto deltas = RoundDeltas::open(fs::path(dir) / kRoundDeltasFolder, job->config_hash_);
  if (!deltas.ok()) return deltas.status();
  job->round_deltas_.emplace(std::move(*deltas));
  auto history = history::HistoryFile::open((fs::path(dir) / history::kHistoryFile).string());
  if (!history.ok()) return history.status();
  job->history_.emplace(std::move(*history));
  job->buffered_history_.emplace([raw = &*job->history_](const history::Record& r) { return raw->append(r); });
  auto rounds = RoundLog::open((fs::path(dir) / kRoundLogFile).string(), job->config_hash_);
  if (!rounds.ok()) return rounds.status();
  job->rounds_.emplace(std::move(*rounds));
  if (job->rounds_->skipped_lines() > 0)
    spdlog::warn("[{}] {}: {} line(s) of another configuration or version are not listed", job->spec_.name,
                 kRoundLogFile, job->rounds_->skipped_lines());
  {
    std::ofstream out(fs::path(dir) / "job.yaml", std::ios::trunc);
    out << job->yaml_;
    GEOLOCO_RETURN_IF(!out.good(), Err::io, "cannot write ", dir, "/job.yaml");
  }
  GEOLOCO_TRY(write_status_file(dir, {job->job_state_, job->file_, job->message_}));
  return job;
}

JobRun::JobRun(JobEnvironment env, job::JobSpec spec, std::string yaml, std::string file, std::string dir)
    : env_(std::move(env)),
      spec_(std::move(spec)),
      yaml_(std::move(yaml)),
      file_(std::move(file)),
      dir_(std::move(dir)),
      id_(job_id_of(spec_.name)),
      config_hash_(digest_hex(xxh3_64(std::as_bytes(std::span<const char>(yaml_))))),
      changed_(env_.executor) {
  if (env_.mesh) {  // without one (tests of the job's files) nothing is sent or received
    outbox_ = ControlOutbox::create(env_.executor, *env_.mesh, spec_.name);
    transfers_.emplace(spec_.name, id_, *env_.mesh);
    transfers_->set_round_steps({config_hash_, spec_.compression, spec_.outer.outer, env_.site.pass_threads()});
  }
}

namespace {
std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

JobRun::~JobRun() {
  // A checkpoint still being written reads this job's state: it ends first
  // (what it did is not recorded: the job is going away).
  if (checkpoint_write_ && checkpoint_write_->thread.joinable()) checkpoint_write_->thread.join();
  // A last try for records that waited for disk space; what still cannot be
  // written is said, not lost silently.
  if (buffered_history_ && buffered_history_->blocked()) {
    (void)buffered_history_->retry(wall_ms());
    if (buffered_history_->blocked())
      spdlog::error("[{}] {} history record(s) could not be written before geolocod stopped and are lost", spec_.name,
                    buffered_history_->waiting());
  }
}

bool JobRun::done() const {
  return job_state_ == JobState::finished || job_state_ == JobState::failed || job_state_ == JobState::cancelled ||
         job_state_ == JobState::stopped;
}

void JobRun::note(const std::string& line) {
  for (const auto& l : repeats_.admit(line, Clock::now())) spdlog::info("[{}] {}", spec_.name, l);
}

void JobRun::record(const history::Event& event) {
  if (!buffered_history_) return;
  const auto change = buffered_history_->append(event, wall_ms());
  if (change.blocked) {
    spdlog::error("[{}] {}", spec_.name, change.message);
    asio::co_spawn(env_.executor, retry_history(), logged("the history's retry"));
  }
  if (change.unblocked) spdlog::info("[{}] {}", spec_.name, change.message);  // the new record flushed the rest
  if (done() && buffered_history_->blocked())
    spdlog::warn(
        "[{}] the job has ended with {} history record(s) still waiting for disk space; they are written "
        "as soon as there is room, and lost if geolocod stops before",
        spec_.name, buffered_history_->waiting());
}

asio::awaitable<void> JobRun::retry_history() {
  auto keep = shared_from_this();
  asio::steady_timer pause(env_.executor);
  while (buffered_history_->blocked()) {
    pause.expires_after(Millis(std::max<std::int64_t>(env_.site.heartbeat_interval_ms, 100)));
    co_await pause.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    const auto change = buffered_history_->retry(wall_ms());
    if (change.unblocked) spdlog::info("[{}] {}", spec_.name, change.message);
  }
  changed_.notify_all();  // a phase held back for the history goes on
}

void JobRun::set_state(JobState state, const std::string& message) {
  job_state_ = state;
  message_ = message;
  if (done() && !ended_recorded_) {
    ended_recorded_ = true;
    record(history::Ended{
        std::string(job_state_name(state)), state_.round,
        state_.anchor.empty() || !anchor_committed_ ? std::string() : digest_hex(state_.anchor_digest()), message});
  }
  if (Status s = write_status_file(dir_, {state, file_, message}); !s.ok())
    spdlog::warn("[{}] {}", spec_.name, s.message());
  changed_.notify_all();
}

// ------------------------------------------------------------------ engine

void JobRun::drive() {
  if (!machine_) return;
  // An action can feed the machine again (ApplyRound answers with
  // on_applied()): the outer loop takes what that queued, in order.
  if (driving_) {
    drive_again_ = true;
    return;
  }
  driving_ = true;
  do {
    drive_again_ = false;
    auto step = machine_->step(Clock::now());
    for (const auto& line : step.notes) note(line);
    for (auto& action : step.actions) execute(action);
    if (!step.actions.empty() || !step.notes.empty()) drive_again_ = true;
    if (step.wake_at && (!wake_at_ || *step.wake_at < *wake_at_)) {
      wake_at_ = step.wake_at;
      if (wake_) wake_->cancel();  // the ticker sleeps until then at the latest
    }
    journal_pending_cleared();
    if (!done() && step_succession()) drive_again_ = true;
  } while (drive_again_);
  driving_ = false;
  changed_.notify_all();
}

void JobRun::execute(ParticipantAction& action) {
  using namespace participant;
  std::visit(
      Overload{
          [&](Send& s) {
            if (auto* r = std::get_if<StateRequestMessage>(&s.message)) {
              transfers_->requested(Clock::now());
              // The holder lists the rounds after the last one this site lists.
              if (!rounds_->records().empty()) r->listed_round = rounds_->records().back().round;
            }
            // A finished site's final COMMITTED to a late one: in this site's epoch, or it is refused.
            if (auto* c = std::get_if<CommittedMessage>(&s.message)) c->epoch = succession_->epoch();
            if (s.now) send_now(s.to, s.message);
            else send(s.to, s.message);
          },
          [&](StartExchange& e) { asio::co_spawn(env_.executor, exchange(e.plan, e.participant), asio::detached); },
          [&](JournalCommit& j) {
            // On disk before it goes; if it cannot be, it does not go (the machine tries again).
            if (!journal_pending_commit(j.pending)) {
              machine_->on_commit_unjournaled();
              return;
            }
            send(j.to, j.commit);
          },
          [&](DeclineExchange& d) {
            env_.mesh->decline({d.round, static_cast<std::uint32_t>(d.attempt)});
          },
          [&](CancelExchange& c) {
            // Past its all-reduce, the exchange's digest pass stops at its next chunk.
            if (exchange_active_ && plan_.round == c.round && plan_.attempt == c.attempt) pass_cancel_ = true;
            env_.mesh->cancel({c.round, static_cast<std::uint32_t>(c.attempt)},
                              Status(Err::io, cat("the exchange of round ", c.round, " attempt ", c.attempt,
                                                  " was given up: ", c.why)));
          },
          [&](ForgetExchange&) { forget_delta(); },
          [&](MoveTrainer& m) {
            // Welcomed with the held anchor only if no trainer trains yet:
            // set_anchor refuses otherwise, and the older anchor stays its base.
            std::vector<float> kept = std::move(late_anchor_);
            late_anchor_ = std::vector<float>();
            if (host_->set_anchor(state_.anchor, m.round).ok()) machine_->on_trainer_moved(m.round);
            else late_anchor_ = std::move(kept);
          },
          [&](ApplyRound& a) {
            asio::co_spawn(env_.executor, apply_committed(a.committed, a.participant), logged("the outer step"));
          },
          [&](ApplyLoggedRound& a) {
            asio::co_spawn(env_.executor, apply_logged(a.committed, a.attempt), logged("the round log's step"));
          },
          [&](KeepTrainerAnchor& k) {
            // Copied already, just before the rounds of the install were stepped in place.
            if (std::exchange(base_kept_for_install_, false)) return;
            if (!late_anchor_.empty()) {
              spdlog::error("[{}] internal: the trainer's older anchor is kept already", spec_.name);
              return;
            }
            finish_checkpoint();  // the anchor a checkpoint reads stays where it is until it is written
            // Installing a new state replaces the anchor: move it. Stepping it in place: copy.
            if (k.replaced) late_anchor_ = std::move(state_.anchor);
            else late_anchor_ = state_.anchor;
          },
          [&](ReleaseTrainer& r) {
            Status s = host_->finish_round(state_.anchor, r.stop, r.next_round);
            if (!s.ok()) spdlog::warn("[{}] finish_round: {}", spec_.name, s.message());
            late_anchor_ = std::vector<float>();  // the trainer continues from state_.anchor
            phase_.reset();
            phase_started_ = Clock::now();
          },
          [&](Record& r) {
            if (const auto* d = std::get_if<history::Dropped>(&r.event); d && env_.metrics)
              (void)env_.metrics->add("geoloco_dropped_tokens_total", {{"job", spec_.name}}, double(d->tokens));
            record(r.event);
          },
          [&](WelcomeTrainer& w) {
            if (Status s = host_->set_anchor(state_.anchor, w.round); !s.ok())
              spdlog::error("[{}] set_anchor: {}", spec_.name, s.message());
            if (job_state_ == JobState::starting) set_state(JobState::running, cat("round ", w.round));
          },
          [&](PublishInitial&) {
            if (Status s = host_->publish_initial(state_.anchor); !s.ok()) machine_->on_trainer_failed(s.message());
            else if (job_state_ == JobState::starting) set_state(JobState::running, cat("round ", state_.round + 1));
          },
          [&](InstallState&) { install_state(); },
          [&](ReceiveState& r) { receive_state(r.peer, r.offer, r.holders); },
          [&](DropTransfer&) { transfers_->drop(); },
          [&](ReleaseDonor& r) { release_donor(r.peer, r.hand_out); },
          [&](OfferState& o) { offer_state(o.peer, o.reason, o.asker, o.listed_round); },
          [&](SaveCheckpoint&) {
            start_checkpoint();  // on its own thread: no round waits for the disk
          },
          [&](EndJob& e) { asio::co_spawn(env_.executor, end_job(e), asio::detached); },
      },
      action);
}

Status JobRun::start() {
  const std::string journal_path = (fs::path(dir_) / "journal").string();
  auto opened = Journal::open(journal_path);
  if (!opened.ok()) return opened.status();
  if (opened->dropped_bytes() > 0)
    note(cat("journal ", journal_path, ": dropped a torn tail of ", opened->dropped_bytes(), " bytes"));
  journal_.emplace(std::move(*opened));
  replay_round_log();
  const std::uint64_t first_round = state_.round + 1;
  succession_.emplace(SuccessionOptions{spec_.sites, spec_.coordinator, self(), Millis(env_.site.heartbeat_timeout_ms),
                                        Millis(env_.site.heartbeat_interval_ms)},
                      office_records(journal_->records()), Clock::now());
  restored_pending_ = summarize_journal(journal_->records()).pending;
  if (succession_->epoch() > 0)
    note(cat("the coordinator's office is in epoch ", succession_->epoch(), ", held by ",
             coordinator().empty() ? std::string("nobody yet (an election)") : coordinator()));
  // An office of a successor whose recovery never reached the journal (a
  // crash between the two) is not acted on: another site stands.
  if (const auto records = office_records(journal_->records());
      is_coordinator() && succession_->epoch() > 0 && records.started != succession_->epoch())
    succession_->resign(cat("the journal holds the office of epoch ", succession_->epoch(),
                            " but not its recovery (a stop in between)"),
                        Clock::now());
  std::optional<HeldState> journal;
  if (is_coordinator()) {
    GEOLOCO_TRY(start_role(std::nullopt, false));
    journal = HeldState{role_->committed_round(), role_->committed_digest()};
  } else if (const JournalSummary s = summarize_journal(journal_->records()); s.round > 0) {
    journal = HeldState{s.round, s.digest};  // it resumes on its own state only at that round or later
  }
  ParticipantOptions po = participant_options(spec_, self(), Millis(env_.site.heartbeat_interval_ms));
  po.coordinator = coordinator();
  machine_.emplace(po, checkpoint_, journal, spec_.checkpoint_every(), Clock::now());
  if (restored_pending_) machine_->on_restored_vote(*restored_pending_);
  // Only the coordinator's trainer may supply the job's initialization, and
  // only when nothing was ever committed; every other trainer waits for the
  // anchor its site holds (STATE_SYNC).
  GEOLOCO_TRY(start_trainer(first_round, machine_->where() == ParticipantMachine::Where::awaiting_initial));
  record(history::Started{self(), state_.round, checkpoint_ ? checkpoint_->digest : std::string(),
                          checkpoint_ ? "checkpoint" : "nothing", std::move(rebuilt_)});
  wake_.emplace(env_.executor);
  asio::co_spawn(env_.executor, run(), logged("the job's engine"));
  return {};
}

asio::awaitable<void> JobRun::run() {
  auto keep = shared_from_this();
  if (role_)
    asio::co_spawn(
        env_.executor, [keep, role = role_]() -> asio::awaitable<void> { co_await role->run(); }, asio::detached);
  phase_started_ = Clock::now();
  drive();  // JOIN, and the anchor: the checkpoint's, or asking a peer for it
  asio::co_spawn(env_.executor, ticker(), logged("the job's ticker"));
  asio::co_spawn(env_.executor, probe_loop(), logged("the job's loop probe"));
  if (machine_->where() == ParticipantMachine::Where::awaiting_initial) {
    auto initial = co_await host_->initial_parameters();
    if (done()) co_return;
    // The layout is computed before the values are moved into the state.
    auto layout = initial.ok() ? layout_for(initial->size(), host_->snapshot().layout) : Layout{};
    auto created = initial.ok() ? outer::OuterState::create(spec_.name, std::move(layout), std::move(*initial))
                                : Result<outer::OuterState>(initial.status());
    if (!created.ok()) {
      machine_->on_trainer_failed(cat("no initial parameters: ", created.status().message()));
      drive();
      co_return;
    }
    finish_checkpoint();
    state_ = std::move(*created);
    // The job's first anchor on disk: what the round log's rounds step from.
    if (Status s = save_checkpoint(); !s.ok())
      spdlog::error("[{}] checkpoint of the initial parameters: {}", spec_.name, s.message());
    machine_->on_initial_parameters(HeldState{0, digest_hex(state_.anchor_digest())});
    drive();
  }
  if (!feedback_ && compression::uses_error_feedback(spec_.compression) && !state_.anchor.empty())
    feedback_ = std::make_unique<compression::ErrorFeedback>(state_.anchor.size());
  co_await watch_trainer();
}

asio::awaitable<void> JobRun::probe_loop() {
  auto keep = shared_from_this();
  asio::steady_timer timer(env_.executor);
  while (!done()) {
    const auto armed = Clock::now();
    const auto due = armed + kLoopProbe;
    timer.expires_at(due);
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    // A probe armed before the round began measures the round before.
    if (armed >= loop_busy_since_) loop_busy_ = std::max(loop_busy_, seconds_between(due, Clock::now()));
  }
}

asio::awaitable<void> JobRun::ticker() {
  auto keep = shared_from_this();
  const auto interval = Millis(env_.site.heartbeat_interval_ms);
  auto heartbeat_at = Clock::now();
  std::string last_phase;
  while (!done()) {
    const auto now = Clock::now();
    // A site whose trainer is not training (none attached, or not welcomed yet) trains nothing,
    // whatever it holds: "idle", so the coordinator does not hold a round for it
    // (coordinator_machine.h, joining sites).
    std::string phase(machine_->heartbeat_phase());
    if (phase == "inner" && (!host_ || !host_->trainer_training())) phase = "idle";
    // To every site, once an interval and as soon as the phase changes: the
    // coordinator counts who is live and which site it should wait for, and
    // every site watches the office holder and ranks its possible successors.
    if (now >= heartbeat_at || phase != last_phase) {
      const HeartbeatMessage beat{state_.round + 1, phase, succession_->epoch(), coordinator(),
                                  journal_->committed_round()};
      for (const auto& site : spec_.sites) send(site, beat);
      heartbeat_at = now + interval;
      last_phase = phase;
    }
    if (wake_at_ && *wake_at_ <= now) wake_at_.reset();
    for (const auto& l : repeats_.flush(now)) spdlog::info("[{}] {}", spec_.name, l);
    drive();  // READY, COMMIT or a state request again, when due
    auto until = wake_at_ ? std::min(*wake_at_, heartbeat_at) : heartbeat_at;
    // Fetching the state or waiting for its trainer, the phase changes
    // soon, and rounds are held or not by it: look again every 100 ms.
    if (phase == "catching_up" || phase == "idle") until = std::min(until, now + Millis(100));
    wake_->expires_at(until);
    co_await wake_->async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
  for (const auto& l : repeats_.drain(Clock::now())) spdlog::info("[{}] {}", spec_.name, l);
}

asio::awaitable<void> JobRun::end_job(participant::EndJob end) {
  auto keep = shared_from_this();
  ending_ = true;
  pass_cancel_ = true;  // the digest pass of an exchange in hand is given up
  // The exchange in flight reads the trainer's replica in the shared segment
  // (and the anchor): give it up and let it end before either goes away.
  if (exchange_running_) {
    env_.mesh->cancel({plan_.round, static_cast<std::uint32_t>(plan_.attempt)},
                      Status(Err::io, cat("job '", spec_.name, "' is ending on ", self())));
    while (exchange_running_) co_await changed_.wait();
  }
  // Its digest pass reads the anchor and the averaged Δ on another thread
  // (seconds); one waiting for a checkpoint to be written gives up then.
  while (exchange_active_) co_await changed_.wait();
  if (end.end == JobEnd::finished) {
    if (process_) {
      // A trainer that got stop with its RESULT exits on its own; one still
      // training (a straggler's) is stopped now: its work can join no round.
      for (int i = 0; i < 100 && host_->stopped() && process_->state() == TrainerProcess::State::running; ++i)
        co_await sleep_for(std::chrono::milliseconds(100));
      co_await process_->stop();
    }
    if (role_) role_->stop();
    if (Status s = save_checkpoint(); !s.ok()) spdlog::error("[{}] final checkpoint: {}", spec_.name, s.message());
    host_->close();
    set_state(JobState::finished, cat("finished after round ", state_.round, "; checkpoint ",
                                      (fs::path(dir_) / "checkpoint.safetensors").string()));
    co_return;
  }
  note(cat("stopping: ", end.reason));
  if (role_) role_->stop();
  if (process_) co_await process_->stop();
  if (host_) host_->close();
  if (end.checkpoint) {
    if (Status s = save_checkpoint(); !s.ok()) spdlog::error("[{}] checkpoint: {}", spec_.name, s.message());
  }
  set_state(state_of(end.end), end.reason);
}

asio::awaitable<void> JobRun::stop(JobState final_state, std::string reason) {
  auto keep = shared_from_this();
  if (done()) co_return;
  if (!machine_) {
    set_state(final_state, reason);
    co_return;
  }
  machine_->on_stop(end_of(final_state), reason);
  drive();
  while (!done()) co_await changed_.wait();
}

}  // namespace geoloco::daemon
