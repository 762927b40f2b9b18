#include "inner/train/run_training.h"

#include <chrono>

namespace geoloco::inner {

Result<TrainReport> run_training(Trainer& trainer, const TrainHooks& hooks) {
  const auto start = std::chrono::steady_clock::now();
  const TrainOptions& o = trainer.options();
  Collective& collective = trainer.collective();
  TrainReport report;
  double loss_since_sync = 0.0;
  std::uint64_t units_since_sync = 0, steps_since_sync = 0, syncs = 0;
  for (std::uint64_t i = 0; i < o.steps; ++i) {
    auto stats = trainer.step();
    if (!stats.ok()) return stats.status();
    report.steps += 1;
    report.work_units += stats->work_units;
    report.last_loss = stats->loss;
    loss_since_sync += stats->loss;
    units_since_sync += stats->work_units;
    steps_since_sync += 1;
    if (hooks.on_step) hooks.on_step(*stats);

    if (hooks.sync_every > 0 && hooks.on_sync && trainer.steps_done() % hooks.sync_every == 0) {
      // Rank 0 talks to the daemon; its outcome travels to the other ranks
      // first, so a failed sync stops everyone instead of leaving them
      // waiting in the parameter broadcast.
      // 1: go on, 2: the job is over (stop after this sync), 0: failed.
      float outcome = 1.0f;
      Status sync_status;
      if (collective.rank() == 0) {
        SyncPoint point{trainer.steps_done(), syncs, trainer.params(), &trainer.layout(),
                        loss_since_sync / static_cast<double>(steps_since_sync), units_since_sync};
        sync_status = hooks.on_sync(point);
        outcome = !sync_status.ok() ? 0.0f : point.stop ? 2.0f : 1.0f;
      }
      GEOLOCO_TRY(collective.broadcast(std::span<float>(&outcome, 1), 0));
      if (!sync_status.ok()) return sync_status;
      GEOLOCO_RETURN_IF(outcome == 0.0f, Err::io, "rank ", collective.rank(), ": the sync on rank 0 failed at step ",
                        trainer.steps_done());
      GEOLOCO_TRY(collective.broadcast(trainer.params(), 0));
      ++syncs;
      loss_since_sync = 0.0;
      units_since_sync = 0;
      steps_since_sync = 0;
      if (outcome == 2.0f) {
        auto eval = trainer.evaluate();
        if (!eval.ok()) return eval.status();
        report.eval = *eval;
        if (hooks.on_eval) hooks.on_eval(trainer.steps_done(), *eval);
        break;
      }
    }

    const bool last = i + 1 == o.steps;
    if (last || (o.eval_every > 0 && trainer.steps_done() % o.eval_every == 0)) {
      auto eval = trainer.evaluate();
      if (!eval.ok()) return eval.status();
      report.eval = *eval;
      if (hooks.on_eval) hooks.on_eval(trainer.steps_done(), *eval);
    }
  }
  if (o.steps == 0) {  // nothing trained: still say where the parameters stand
    auto eval = trainer.evaluate();
    if (!eval.ok()) return eval.status();
    report.eval = *eval;
    if (hooks.on_eval) hooks.on_eval(trainer.steps_done(), *eval);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace geoloco::inner
