#include "inner/train/synced_training.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <vector>

#include "diloco/fragments.h"
#include "inner/train/inner_state.h"
#include "inner/train/trainer.h"

namespace geoloco::inner {

namespace {

// The collectives carry floats. A u64 travels as four 16-bit pieces, each
// exact in a float, so no backend (memcpy or not) can change it.
Status broadcast_u64s(Collective& collective, std::span<std::uint64_t> values) {
  std::vector<float> pieces(values.size() * 4);
  if (collective.rank() == 0)
    for (std::size_t i = 0; i < values.size(); ++i)
      for (int k = 0; k < 4; ++k) pieces[i * 4 + k] = static_cast<float>((values[i] >> (16 * k)) & 0xffffu);
  GEOLOCO_TRY(collective.broadcast(pieces, 0));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint64_t v = 0;
    for (int k = 0; k < 4; ++k) v |= static_cast<std::uint64_t>(pieces[i * 4 + k]) << (16 * k);
    values[i] = v;
  }
  return {};
}

}  // namespace

Status SyncedOptions::validate() const {
  GEOLOCO_RETURN_IF(socket_path.empty() && !channel, Err::invalid_argument,
                    "--sync-socket (or GEOLOCO_SOCKET) must name the daemon's sync socket");
  GEOLOCO_RETURN_IF(job.empty(), Err::invalid_argument, "--job (or GEOLOCO_JOB) must name the job");
  GEOLOCO_RETURN_IF(sync_every > 0 && sync_seconds > 0.0, Err::invalid_argument,
                    "--sync-every and --sync-seconds exclude each other: a round's inner phase is H steps or S "
                    "seconds, not both");
  GEOLOCO_RETURN_IF(
      sync_every == 0 && !(sync_seconds > 0.0), Err::invalid_argument,
      "with a daemon, --sync-every H (steps per round) or --sync-seconds S (seconds per round) must be set");
  GEOLOCO_RETURN_IF(!std::isfinite(sync_seconds), Err::invalid_argument, "--sync-seconds must be finite");
  GEOLOCO_RETURN_IF(min_steps == 0, Err::invalid_argument, "--min-steps must be >= 1");
  GEOLOCO_RETURN_IF(eval_rounds == 0, Err::invalid_argument,
                    "--eval-rounds must be >= 1 (1 evaluates every anchor the daemon hands over)");
  GEOLOCO_RETURN_IF(timeout_ms <= 0, Err::invalid_argument, "the daemon timeout must be > 0 ms");
  GEOLOCO_RETURN_IF(!(alpha >= 0.0 && alpha <= 1.0), Err::invalid_argument,
                    "--alpha must be in [0, 1] (the local replica's weight in the merge), got ", alpha);
  GEOLOCO_RETURN_IF(merge_delayed && alpha > 0.0, Err::invalid_argument,
                    "--merge delayed keeps the local progress; --alpha weighs a merge that replaces it: not both");
  GEOLOCO_RETURN_IF((overlap_steps > 0 || alpha > 0.0 || merge_delayed) && sync_seconds > 0.0, Err::invalid_argument,
                    "--overlap, --alpha and --merge delayed need step-based phases: use --sync-every H instead of "
                    "--sync-seconds "
                    "(streaming with time-based phases is not supported)");
  GEOLOCO_RETURN_IF(overlap_steps > sync_every && sync_every > 0, Err::invalid_argument, "--overlap ", overlap_steps,
                    " is longer than a round's inner phase (--sync-every ", sync_every,
                    "): a fragment must be merged before it syncs again");
  return {};
}

std::uint64_t steps_before_round(std::uint64_t round, std::uint64_t first_round, std::uint64_t sync_every,
                                 std::uint32_t fragments) {
  return round > first_round ? diloco::steps_through_round(round - first_round, fragments, sync_every) : 0;
}

Result<std::unique_ptr<SyncedTraining>> SyncedTraining::start(const TrainOptions& options, const SyncedOptions& sync,
                                                              Collective& collective,
                                                              std::shared_ptr<const Dataset> dataset, std::ostream& out,
                                                              TrainerFactory make_trainer) {
  GEOLOCO_TRY(sync.validate());
  GEOLOCO_TRY(options.validate());
  std::unique_ptr<SyncedTraining> s(new SyncedTraining(sync, out));
  const bool talk = collective.rank() == 0;

  // Rank 0 connects and decides the mode (plain or streaming) from the
  // WELCOME table; every rank learns the outcome, so a refusal (or a daemon
  // that is not there) stops them all at once instead of at a timeout.
  // setup: ok, anchor ready, streaming, schedule fragments.
  float setup[4] = {0.0f, 0.0f, 0.0f, 1.0f};
  Status connected;
  if (talk) {
    connected = s->connect(options);
    setup[0] = connected.ok() ? 1.0f : 0.0f;
    if (connected.ok()) {
      setup[1] = s->daemon_->anchor_ready() ? 1.0f : 0.0f;
      setup[2] = s->plan_.streaming ? 1.0f : 0.0f;
      setup[3] = static_cast<float>(s->plan_.schedule_fragments);  // exact: a fragment count fits 24 bits
    }
  }
  GEOLOCO_TRY(collective.broadcast(std::span<float>(setup, 4), 0));
  if (!connected.ok()) return connected;
  GEOLOCO_RETURN_IF(setup[0] != 1.0f, Err::io, "rank ", collective.rank(),
                    ": rank 0 could not start with the daemon (its output says why)");
  const bool anchor_ready = setup[1] == 1.0f;
  s->plan_.streaming = setup[2] == 1.0f;
  s->plan_.schedule_fragments = static_cast<std::uint32_t>(setup[3]);

  // Plain DiLoCo: rank 0 trains in the segment the daemon shares. Streaming:
  // the daemon writes a fragment's RESULT into the segment while the
  // trainer still trains, so the trainer keeps its own parameters.
  std::span<float> storage;
  if (talk && !s->plan_.streaming) storage = s->daemon_->parameters();
  if (!make_trainer) make_trainer = Trainer::factory();
  auto trainer = make_trainer(options, collective, std::move(dataset), storage, /*initialize=*/!anchor_ready);
  if (!trainer.ok()) return trainer.status();
  s->trainer_ = std::move(*trainer);
  InnerTrainer& t = *s->trainer_;
  if (talk) GEOLOCO_TRY(s->take_anchor(anchor_ready));
  GEOLOCO_TRY(t.broadcast_params(0));
  s->layout_digest_ = layout_digest(t.layout());

  // Where round r starts: rank 0 decides (it alone reads the state file),
  // every rank follows. header: round, resume step, state used, AdamW step.
  std::uint64_t header[4] = {0, 0, 0, 0};
  InnerState state;
  if (talk) {
    const std::uint64_t round = s->daemon_->next_round();
    header[0] = round;
    header[1] = steps_before_round(round, sync.first_round, sync.sync_every, s->plan_.schedule_fragments);
    if (!sync.state_dir.empty()) {
      auto loaded = load_inner_state(sync.state_dir);
      const StateChoice choice =
          choose_inner_state(loaded, sync.state_dir, round, s->layout_digest_, t.layout().total());
      out << "inner state: " << choice.reason << std::endl;
      if (choice.use) {
        state = std::move(**loaded);
        header[1] = state.steps_done;
        header[2] = 1;
        header[3] = state.adamw_steps;
      }
    }
  }
  GEOLOCO_TRY(broadcast_u64s(collective, header));
  s->welcome_round_ = header[0];
  s->resume_step_ = header[1];
  s->state_loaded_ = header[2] == 1;
  if (s->state_loaded_) {
    const std::size_t n = t.layout().total();
    state.m.resize(n);  // no-ops on rank 0
    state.v.resize(n);
    GEOLOCO_TRY(collective.broadcast(state.m, 0));
    GEOLOCO_TRY(collective.broadcast(state.v, 0));
    GEOLOCO_TRY(t.restore_optimizer(state.m, state.v, header[3]));
  }
  GEOLOCO_TRY(t.resume_at(s->resume_step_));
  if (talk) {
    out << "welcomed at round " << s->welcome_round_ << " (first round " << sync.first_round
        << "): schedule and data from step " << s->resume_step_ << (s->state_loaded_ ? " (saved state)" : "")
        << ", AdamW " << (s->state_loaded_ ? "moments restored" : "moments zero") << std::endl;
    if (s->plan_.streaming)
      out << "streaming: " << s->daemon_->fragments().size() << " fragment(s), "
          << (s->plan_.schedule_fragments > 1 ? "one per round" : "all in every round") << ", overlap "
          << sync.overlap_steps << " step(s), alpha " << sync.alpha << "; the trainer keeps its own parameters"
          << std::endl;
    if (s->resume_step_ >= options.steps)
      out << "warning: step " << s->resume_step_ << " is at or past --steps " << options.steps
          << ": nothing left to train" << std::endl;
    GEOLOCO_TRY(s->log_anchor(s->welcome_round_, true));  // with --eval-log
  }
  return s;
}

Status SyncedTraining::log_anchor(std::uint64_t round, bool always) {
  if (!eval_log_) return {};
  // Every Nth round's anchor counted from the job's first round, which is always evaluated.
  if (!always && round >= sync_.first_round && (round - sync_.first_round) % sync_.eval_rounds != 0) return {};
  auto eval = trainer_->evaluate();
  if (!eval.ok()) return eval.status();
  EvalLogEntry e;
  e.round = round;
  e.eval = *eval;
  e.has_accuracy = trainer_->options().model == "mlp";
  e.items = trainer_->dataset().eval_items();
  e.unix_time = unix_time_now();
  return eval_log_->append(e);
}

Status SyncedTraining::connect(const TrainOptions& options) {
  if (!sync_.eval_log.empty()) {  // a bad path fails before the daemon hears of this trainer
    auto log = EvalLog::open(sync_.eval_log);
    if (!log.ok()) return log.status();
    eval_log_ = std::move(*log);
  }
  auto model = make_model(options);
  if (!model.ok()) return model.status();
  const ChannelFactory channel =
      sync_.channel ? sync_.channel : socket_channel(sync_.socket_path, sync_.job, sync_.timeout_ms);
  auto connected = DaemonSync::connect(channel, (*model)->layout(), sync_.timeout_ms);
  if (!connected.ok()) return connected.status();
  daemon_ = std::move(*connected);
  if (sync_.merge_delayed) daemon_->use_delayed_merge();
  auto plan = plan_sync(daemon_->fragments(), sync_.sync_every, sync_.sync_seconds, sync_.overlap_steps, sync_.alpha);
  if (!plan.ok()) return plan.status();
  plan_ = *plan;
  return {};
}

Status SyncedTraining::take_anchor(bool anchor_ready) {
  InnerTrainer& t = *trainer_;
  const std::span<float> segment = daemon_->parameters();
  if (!anchor_ready) {
    GEOLOCO_TRY(t.params_to_host());  // the daemon reads the initialization from the segment
    if (plan_.streaming) std::copy(t.host_params().begin(), t.host_params().end(), segment.begin());
    GEOLOCO_TRY(daemon_->hand_over_initial());
  }
  // The segment holds the anchor (the welcome's, or the one the daemon
  // settled on, maybe another site's): it becomes the trainer's parameters.
  if (plan_.streaming) std::copy(segment.begin(), segment.end(), t.host_params().begin());
  return t.params_from_host();
}

void SyncedTraining::save_state(std::uint64_t next_round) {
  if (sync_.state_dir.empty()) return;
  // A failed save costs a restarted trainer its moments, not this one its
  // round: say so and go on.
  auto adamw = trainer_->optimizer_state();
  Status s = adamw.status();
  if (s.ok())
    s = save_inner_state(sync_.state_dir, next_round, trainer_->steps_done(), adamw->steps, layout_digest_, adamw->m,
                         adamw->v);
  if (!s.ok())
    out_ << "inner state: not saved (" << s.message() << "); a restart would begin round " << next_round
         << " with zero AdamW moments" << std::endl;
}

protocol::SyncTiming SyncedTraining::since_last_sync(const SyncPoint& point) {
  const protocol::SyncTiming timing{point.compute_seconds - compute_at_last_sync_,
                                    point.loop_seconds - loop_at_last_sync_};
  compute_at_last_sync_ = point.compute_seconds;
  loop_at_last_sync_ = point.loop_seconds;
  return timing;
}

namespace {
/// "; computed C of the W s since the last sync (S%)" (bench/utilization.py reads it).
std::string timing_text(const protocol::SyncTiming& t) {
  char text[96];
  std::snprintf(text, sizeof text, "; computed %.3f of the %.3f s since the last sync (%.1f%%)", t.compute_seconds,
                t.loop_seconds, t.loop_seconds > 0.0 ? 100.0 * t.compute_seconds / t.loop_seconds : 0.0);
  return text;
}
}  // namespace

Status SyncedTraining::on_sync(SyncPoint& point) {
  const std::uint64_t round = daemon_->next_round();
  const protocol::SyncTiming timing = since_last_sync(point);
  GEOLOCO_TRY(daemon_->sync(point, timing));
  const std::uint64_t next = daemon_->next_round();
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f", point.phase_seconds);
  out_ << "round " << round << " synced: " << point.phase_steps << " steps in " << seconds << " s, " << point.work_units
       << " " << trainer_->model().work_unit_name() << ", mean loss " << point.mean_loss << timing_text(timing)
       << (point.stop ? "; the daemon says stop" : "") << std::endl;
  save_state(next);
  next_round_ = next;  // after_sync logs the anchor once the trainer holds it
  return {};
}

bool SyncedTraining::streaming_phase_end(std::uint64_t steps) const {
  // Never while a fragment is out (plan_sync keeps τ within the shortest phase).
  if (!daemon_->in_flight().empty()) return false;
  return steps >=
         diloco::phase_steps(daemon_->next_round(), sync_.first_round, plan_.schedule_fragments, sync_.sync_every);
}

Status SyncedTraining::hand_out(SyncPoint& point) {
  const std::uint64_t round = daemon_->next_round();
  const protocol::SyncTiming timing = since_last_sync(point);
  auto sent = daemon_->hand_out(point.params, point.work_units, point.mean_loss, timing);
  if (!sent.ok()) return sent.status();
  synced_round_ = round;
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f", point.phase_seconds);
  out_ << "round " << round << " synced (fragment";
  for (std::uint32_t f : *sent) out_ << " " << f;
  out_ << ") at step " << point.step << ": " << point.phase_steps << " steps in " << seconds << " s, "
       << point.work_units << " " << trainer_->model().work_unit_name() << ", mean loss " << point.mean_loss
       << timing_text(timing) << std::endl;
  return {};
}

Status SyncedTraining::merge(SyncPoint& point) {
  const std::vector<std::uint32_t> merged = daemon_->in_flight();
  auto stop = daemon_->merge(point.params, sync_.alpha);
  if (!stop.ok()) return stop.status();
  point.stop = *stop;
  const std::uint64_t next = daemon_->next_round();
  out_ << "round " << synced_round_ << " merged at step " << trainer_->steps_done() << "; next sync: round " << next
       << (point.stop ? "; the daemon says stop" : "") << std::endl;
  save_state(next);
  // The merged parameters are a whole anchor's worth of new global values
  // only once every fragment came back in this period: when fragment 0
  // (the period's last) did, and at the end.
  log_after_sync_ = point.stop || std::find(merged.begin(), merged.end(), 0u) != merged.end();
  next_round_ = synced_round_ + 1;
  return {};
}

Result<TrainReport> SyncedTraining::run(TrainHooks hooks) {
  hooks.min_steps = sync_.min_steps;
  // Called on rank 0 only.
  hooks.after_sync = [this](const SyncPoint& point) {
    return log_after_sync_ ? log_anchor(next_round_, point.stop) : Status();
  };
  if (!plan_.streaming) {
    hooks.sync_every = sync_.sync_every;
    hooks.sync_seconds = sync_.sync_seconds;
    hooks.on_sync = [this](SyncPoint& point) { return on_sync(point); };
  } else {
    hooks.sync_every = 0;  // rank 0's phase_end follows the daemon's rounds
    hooks.sync_seconds = 0.0;
    hooks.phase_end = [this](std::uint64_t steps) { return streaming_phase_end(steps); };
    hooks.on_sync = [this](SyncPoint& point) { return hand_out(point); };
    hooks.on_merge = [this](SyncPoint& point) { return merge(point); };
    hooks.merge_after = sync_.overlap_steps;
  }
  return run_training(*trainer_, hooks);
}

}  // namespace geoloco::inner
