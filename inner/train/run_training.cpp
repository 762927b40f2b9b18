#include "inner/train/run_training.h"

#include <chrono>
#include <cmath>
#include <thread>

namespace geoloco::inner {

bool phase_over(const TrainHooks& hooks, std::uint64_t phase_steps, double phase_seconds) {
  if (hooks.sync_every > 0) return phase_steps >= hooks.sync_every;
  if (hooks.sync_seconds > 0.0) return phase_steps >= hooks.min_steps && phase_seconds >= hooks.sync_seconds;
  return false;
}

Status validate_hooks(const TrainHooks& hooks) {
  GEOLOCO_RETURN_IF(hooks.sync_every > 0 && hooks.sync_seconds > 0.0, Err::invalid_argument, "sync_every (",
                    hooks.sync_every, " steps) and sync_seconds (", hooks.sync_seconds,
                    " s) exclude each other: a phase is a number of steps or a duration");
  GEOLOCO_RETURN_IF(!(hooks.sync_seconds >= 0.0 && std::isfinite(hooks.sync_seconds)), Err::invalid_argument,
                    "sync_seconds must be finite and >= 0, got ", hooks.sync_seconds);
  GEOLOCO_RETURN_IF(hooks.min_steps == 0, Err::invalid_argument, "min_steps must be >= 1");
  return {};
}

Result<TrainReport> run_training(InnerTrainer& trainer, const TrainHooks& hooks) {
  GEOLOCO_TRY(validate_hooks(hooks));
  const auto start = std::chrono::steady_clock::now();
  std::function<double()> clock = hooks.clock;
  if (!clock)
    clock = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  const TrainOptions& o = trainer.options();
  Collective& collective = trainer.collective();
  const bool syncing = hooks.on_sync && (hooks.sync_every > 0 || hooks.sync_seconds > 0.0);
  const bool timed = syncing && hooks.sync_seconds > 0.0;
  TrainReport report;
  double loss_since_sync = 0.0;
  std::uint64_t units_since_sync = 0, steps_since_sync = 0, syncs = 0;
  double phase_start = syncing && collective.rank() == 0 ? clock() : 0.0;
  while (trainer.steps_done() < o.steps) {
    auto stats = trainer.step();
    if (!stats.ok()) return stats.status();
    if (hooks.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hooks.step_delay_ms));
    report.steps += 1;
    report.work_units += stats->work_units;
    report.last_loss = stats->loss;
    loss_since_sync += stats->loss;
    units_since_sync += stats->work_units;
    steps_since_sync += 1;
    if (hooks.on_step) hooks.on_step(*stats);

    // Step-based phases: every rank counts the same steps. Time-based: only
    // rank 0's clock counts, and its decision travels to the others.
    bool phase_end = false;
    double phase_seconds = 0.0;
    if (syncing) {
      if (collective.rank() == 0) {
        phase_seconds = clock() - phase_start;
        phase_end = phase_over(hooks, steps_since_sync, phase_seconds);
      }
      if (timed) {
        float end = phase_end ? 1.0f : 0.0f;
        GEOLOCO_TRY(collective.broadcast(std::span<float>(&end, 1), 0));
        phase_end = end == 1.0f;
      } else {
        phase_end = phase_over(hooks, steps_since_sync, 0.0);
      }
    }
    if (phase_end) {
      // Rank 0 talks to the daemon: the replica goes to host memory (a copy
      // only on the GPU), on_sync hands it over and leaves the anchor there,
      // and the anchor becomes the training parameters again before
      // after_sync looks at it. The outcome travels to the other ranks
      // first, so a failed sync stops everyone instead of leaving them
      // waiting in the parameter broadcast.
      // 1: go on, 2: the job is over (stop after this sync), 0: failed.
      float outcome = 1.0f;
      Status sync_status;
      if (collective.rank() == 0) {
        SyncPoint point{trainer.steps_done(),
                        syncs,
                        trainer.host_params(),
                        &trainer.layout(),
                        loss_since_sync / static_cast<double>(steps_since_sync),
                        units_since_sync,
                        steps_since_sync,
                        phase_seconds};
        sync_status = trainer.params_to_host();
        if (sync_status.ok()) sync_status = hooks.on_sync(point);
        if (sync_status.ok()) sync_status = trainer.params_from_host();
        if (sync_status.ok() && hooks.after_sync) sync_status = hooks.after_sync(point);
        outcome = !sync_status.ok() ? 0.0f : point.stop ? 2.0f : 1.0f;
      }
      GEOLOCO_TRY(collective.broadcast(std::span<float>(&outcome, 1), 0));
      if (!sync_status.ok()) return sync_status;
      GEOLOCO_RETURN_IF(outcome == 0.0f, Err::io, "rank ", collective.rank(), ": the sync on rank 0 failed at step ",
                        trainer.steps_done());
      GEOLOCO_TRY(trainer.broadcast_params(0));
      ++syncs;
      loss_since_sync = 0.0;
      units_since_sync = 0;
      steps_since_sync = 0;
      if (collective.rank() == 0) phase_start = clock();  // the next phase starts after the sync
      if (outcome == 2.0f) {
        auto eval = trainer.evaluate();
        if (!eval.ok()) return eval.status();
        report.eval = *eval;
        if (hooks.on_eval) hooks.on_eval(trainer.steps_done(), *eval);
        break;
      }
    }

    const bool last = trainer.steps_done() == o.steps;
    if (last || (o.eval_every > 0 && trainer.steps_done() % o.eval_every == 0)) {
      auto eval = trainer.evaluate();
      if (!eval.ok()) return eval.status();
      report.eval = *eval;
      if (hooks.on_eval) hooks.on_eval(trainer.steps_done(), *eval);
    }
  }
  if (report.steps == 0) {  // nothing trained: still say where the parameters stand
    auto eval = trainer.evaluate();
    if (!eval.ok()) return eval.status();
    report.eval = *eval;
    if (hooks.on_eval) hooks.on_eval(trainer.steps_done(), *eval);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace geoloco::inner
