#include "inner/train/synced_training.h"

#include <cmath>
#include <cstdio>
#include <ostream>
#include <vector>

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
  GEOLOCO_RETURN_IF(socket_path.empty(), Err::invalid_argument,
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
  GEOLOCO_RETURN_IF(timeout_ms <= 0, Err::invalid_argument, "the daemon timeout must be > 0 ms");
  return {};
}

std::uint64_t steps_before_round(std::uint64_t round, std::uint64_t first_round, std::uint64_t sync_every) {
  return round > first_round ? (round - first_round) * sync_every : 0;
}

Result<std::unique_ptr<SyncedTraining>> SyncedTraining::start(const TrainOptions& options, const SyncedOptions& sync,
                                                              Collective& collective,
                                                              std::shared_ptr<const Dataset> dataset,
                                                              std::ostream& out, TrainerFactory make_trainer) {
  GEOLOCO_TRY(sync.validate());
  GEOLOCO_TRY(options.validate());
  std::unique_ptr<SyncedTraining> s(new SyncedTraining(sync, out));
  const bool talk = collective.rank() == 0;

  // Rank 0 trains in the segment the daemon shares; it starts from the
  // daemon's anchor, or hands over its own initialization when the daemon
  // has none yet. Every rank then starts from the same bits.
  std::span<float> storage;
  float anchor_ready = 0.0f;
  if (talk) {
    if (!sync.eval_log.empty()) {  // a bad path fails before the daemon hears of this trainer
      auto log = EvalLog::open(sync.eval_log);
      if (!log.ok()) return log.status();
      s->eval_log_ = std::move(*log);
    }
    auto model = make_model(options);
    if (!model.ok()) return model.status();
    auto connected = DaemonSync::connect(sync.socket_path, sync.job, (*model)->layout(), sync.timeout_ms);
    if (!connected.ok()) return connected.status();
    s->daemon_ = std::move(*connected);
    storage = s->daemon_->parameters();
    anchor_ready = s->daemon_->anchor_ready() ? 1.0f : 0.0f;
  }
  GEOLOCO_TRY(collective.broadcast(std::span<float>(&anchor_ready, 1), 0));
  if (!make_trainer) make_trainer = Trainer::factory();
  auto trainer = make_trainer(options, collective, std::move(dataset), storage, /*initialize=*/anchor_ready == 0.0f);
  if (!trainer.ok()) return trainer.status();
  s->trainer_ = std::move(*trainer);
  InnerTrainer& t = *s->trainer_;
  if (talk && anchor_ready == 0.0f) {
    GEOLOCO_TRY(t.params_to_host());  // the daemon reads the initialization from the segment
    GEOLOCO_TRY(s->daemon_->hand_over_initial());
  }
  // The segment holds the anchor (the welcome's, or the one the daemon
  // settled on, maybe another site's): it becomes every rank's parameters.
  if (talk) GEOLOCO_TRY(t.params_from_host());
  GEOLOCO_TRY(t.broadcast_params(0));
  s->layout_digest_ = layout_digest(t.layout());

  // Where round r starts: rank 0 decides (it alone reads the state file),
  // every rank follows. header: round, resume step, state used, AdamW step.
  std::uint64_t header[4] = {0, 0, 0, 0};
  InnerState state;
  if (talk) {
    const std::uint64_t round = s->daemon_->next_round();
    header[0] = round;
    header[1] = steps_before_round(round, sync.first_round, sync.sync_every);
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
    if (s->resume_step_ >= options.steps)
      out << "warning: step " << s->resume_step_ << " is at or past --steps " << options.steps
          << ": nothing left to train" << std::endl;
    GEOLOCO_TRY(s->log_anchor(s->welcome_round_));  // with --eval-log
  }
  return s;
}

Status SyncedTraining::log_anchor(std::uint64_t round) {
  if (!eval_log_) return {};
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

Status SyncedTraining::on_sync(SyncPoint& point) {
  const std::uint64_t round = daemon_->next_round();
  GEOLOCO_TRY(daemon_->sync(point));
  const std::uint64_t next = daemon_->next_round();
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f", point.phase_seconds);
  out_ << "round " << round << " synced: " << point.phase_steps << " steps in " << seconds << " s, " << point.work_units
       << " " << trainer_->model().work_unit_name() << ", mean loss " << point.mean_loss
       << (point.stop ? "; the daemon says stop" : "") << std::endl;
  if (!sync_.state_dir.empty()) {
    // A failed save costs a restarted trainer its moments, not this one its
    // round: say so and go on.
    auto adamw = trainer_->optimizer_state();
    Status s = adamw.status();
    if (s.ok())
      s = save_inner_state(sync_.state_dir, next, trainer_->steps_done(), adamw->steps, layout_digest_, adamw->m,
                           adamw->v);
    if (!s.ok())
      out_ << "inner state: not saved (" << s.message() << "); a restart would begin round " << next
           << " with zero AdamW moments" << std::endl;
  }
  next_round_ = next;  // after_sync logs the anchor once the trainer holds it
  return {};
}

Result<TrainReport> SyncedTraining::run(TrainHooks hooks) {
  hooks.sync_every = sync_.sync_every;
  hooks.sync_seconds = sync_.sync_seconds;
  hooks.min_steps = sync_.min_steps;
  hooks.on_sync = [this](SyncPoint& point) { return on_sync(point); };  // called on rank 0 only
  hooks.after_sync = [this](const SyncPoint&) { return log_anchor(next_round_); };
  return run_training(*trainer_, hooks);
}

}  // namespace geoloco::inner
