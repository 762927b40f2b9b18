#include "inner/train/run_training.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "diloco/phase.h"

namespace geoloco::inner {

bool phase_over(const TrainHooks& hooks, std::uint64_t phase_steps, double phase_seconds) {
  if (hooks.sync_every == 0 && !(hooks.sync_seconds > 0.0)) return false;  // phases are not the loop's to end
  return diloco::phase_over({hooks.sync_every, hooks.sync_seconds, hooks.min_steps}, phase_steps, phase_seconds);
}

Status validate_hooks(const TrainHooks& hooks) {
  GEOLOCO_RETURN_IF(hooks.sync_every > 0 && hooks.sync_seconds > 0.0, Err::invalid_argument, "sync_every (",
                    hooks.sync_every, " steps) and sync_seconds (", hooks.sync_seconds,
                    " s) exclude each other: a phase is a number of steps or a duration");
  GEOLOCO_RETURN_IF(hooks.phase_end && (hooks.sync_every > 0 || hooks.sync_seconds > 0.0), Err::invalid_argument,
                    "phase_end decides where phases end: sync_every and sync_seconds must be 0 with it");
  GEOLOCO_RETURN_IF(!(hooks.sync_seconds >= 0.0 && std::isfinite(hooks.sync_seconds)), Err::invalid_argument,
                    "sync_seconds must be finite and >= 0, got ", hooks.sync_seconds);
  GEOLOCO_RETURN_IF(hooks.min_steps == 0, Err::invalid_argument, "min_steps must be >= 1");
  return {};
}

namespace {

// Rank 0's outcome of a sync or merge, as it travels to every rank.
constexpr float kFailed = 0.0f, kGoOn = 1.0f, kStop = 2.0f;

// The loop's state between steps (the same on every rank except phase_start
// and pending, which only rank 0 uses).
struct Loop {
  Loop(InnerTrainer& t, const TrainHooks& h) : trainer(t), hooks(h), clock(h.clock) {
    if (!clock)
      clock = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  }
  InnerTrainer& trainer;
  const TrainHooks& hooks;
  std::function<double()> clock;
  bool syncing = false, decided_by_rank0 = false;
  double loss_since_sync = 0.0;
  std::uint64_t units_since_sync = 0, steps_since_sync = 0, syncs = 0;
  double phase_start = 0.0;
  // Rank 0's clock: where the loop started, and the time since spent in
  // steps and in evaluations (the compute share; SyncPoint).
  double loop_start = 0.0, compute = 0.0, evaluating = 0.0;
  bool merge_pending = false;
  SyncPoint pending;  // rank 0, streaming: the sync whose merge is pending

  bool rank0() { return trainer.collective().rank() == 0; }

  // Rank 0's point for the phase that just ended.
  SyncPoint point(double phase_seconds) {
    return SyncPoint{trainer.steps_done(),
                     syncs,
                     trainer.host_params(),
                     &trainer.layout(),
                     loss_since_sync / static_cast<double>(steps_since_sync),
                     units_since_sync,
                     steps_since_sync,
                     phase_seconds,
                     compute,
                     loop_seconds()};
  }

  // Rank 0's clock since the loop started, without evaluations.
  double loop_seconds() { return clock() - loop_start - evaluating; }

  // Step-based phases: every rank counts the same steps. Time-based (and
  // phase_end): only rank 0 decides, and its decision travels to the others.
  Result<bool> phase_over_now(double& phase_seconds) {
    if (!syncing) return false;
    bool end = false;
    if (rank0()) {
      phase_seconds = clock() - phase_start;
      end = hooks.phase_end ? hooks.phase_end(steps_since_sync) : phase_over(hooks, steps_since_sync, phase_seconds);
    }
    if (!decided_by_rank0) return phase_over(hooks, steps_since_sync, 0.0);
    float e = end ? 1.0f : 0.0f;
    GEOLOCO_TRY(trainer.collective().broadcast(std::span<float>(&e, 1), 0));
    return e == 1.0f;
  }

  // The outcome travels to the other ranks before any parameter does, so a
  // failure on rank 0 stops everyone instead of leaving them waiting in the
  // parameter broadcast. Returns kGoOn or kStop on every rank.
  Result<float> share_outcome(const Status& rank0_status, bool stop) {
    float outcome = !rank0_status.ok() ? kFailed : stop ? kStop : kGoOn;
    GEOLOCO_TRY(trainer.collective().broadcast(std::span<float>(&outcome, 1), 0));
    if (!rank0_status.ok()) return rank0_status;
    GEOLOCO_RETURN_IF(outcome == kFailed, Err::io, "rank ", trainer.collective().rank(),
                      ": the sync on rank 0 failed at step ", trainer.steps_done());
    return outcome;
  }

  // Rank 0: after_sync evaluates the anchor: its time counts as an
  // evaluation's, not as time the sync held training.
  Status after_sync(const SyncPoint& p) {
    if (!hooks.after_sync) return {};
    const double started = clock();
    Status status = hooks.after_sync(p);
    evaluating += clock() - started;
    return status;
  }

  void phase_done() {
    ++syncs;
    loss_since_sync = 0.0;
    units_since_sync = 0;
    steps_since_sync = 0;
    if (rank0()) phase_start = clock();  // the next phase starts after the sync
  }

  // Plain DiLoCo: rank 0 talks to the daemon: the replica goes to host
  // memory (a copy only on the GPU), on_sync hands it over and leaves the
  // anchor there, and the anchor becomes the training parameters again
  // before after_sync looks at it; every rank then continues from it.
  // Returns whether the job is over.
  Result<bool> sync(double phase_seconds) {
    Status status;
    bool stop = false;
    if (rank0()) {
      SyncPoint p = point(phase_seconds);
      status = trainer.params_to_host();
      if (status.ok()) status = hooks.on_sync(p);
      if (status.ok()) status = trainer.params_from_host();
      if (status.ok()) status = after_sync(p);
      stop = p.stop;
    }
    auto outcome = share_outcome(status, stop);
    if (!outcome.ok()) return outcome.status();
    GEOLOCO_TRY(trainer.broadcast_params(0));
    phase_done();
    return *outcome == kStop;
  }

  // Streaming, first half: rank 0 hands the replica out; nobody's
  // parameters change, so there is nothing to broadcast but the outcome.
  Status hand_out(double phase_seconds) {
    Status status;
    if (rank0()) {
      pending = point(phase_seconds);
      status = trainer.params_to_host();
      if (status.ok()) status = hooks.on_sync(pending);
    }
    auto outcome = share_outcome(status, false);
    if (!outcome.ok()) return outcome.status();
    phase_done();
    merge_pending = true;
    return {};
  }

  // Streaming, second half: rank 0 merges the new global values into its
  // replica; every rank continues from rank 0's parameters. Returns whether
  // the job is over.
  Result<bool> merge() {
    Status status;
    bool stop = false;
    if (rank0()) {
      status = trainer.params_to_host();
      pending.params = trainer.host_params();
      if (status.ok()) status = hooks.on_merge(pending);
      if (status.ok()) status = trainer.params_from_host();
      if (status.ok()) status = after_sync(pending);
      stop = pending.stop;
    }
    merge_pending = false;
    auto outcome = share_outcome(status, stop);
    if (!outcome.ok()) return outcome.status();
    GEOLOCO_TRY(trainer.broadcast_params(0));
    return *outcome == kStop;
  }

  // Everything a sync does after a step (plain or streaming). Returns
  // whether the job is over.
  Result<bool> after_step(bool last) {
    // A pending merge comes first: its fragment is back before the next one leaves.
    if (merge_pending && (steps_since_sync >= hooks.merge_after || last)) {
      auto stop = merge();
      if (!stop.ok() || *stop) return stop;
    }
    double phase_seconds = 0.0;
    auto end = phase_over_now(phase_seconds);
    if (!end.ok() || !*end) return end.ok() ? Result<bool>(false) : end;
    if (!hooks.on_merge) return sync(phase_seconds);
    GEOLOCO_TRY(hand_out(phase_seconds));
    if (hooks.merge_after == 0 || last) return merge();
    return false;
  }
};

Status evaluate_into(Loop& loop, TrainReport& report) {
  const double started = loop.clock();
  auto eval = loop.trainer.evaluate();
  if (!eval.ok()) return eval.status();
  report.eval = *eval;
  if (loop.hooks.on_eval) loop.hooks.on_eval(loop.trainer.steps_done(), *eval);
  loop.evaluating += loop.clock() - started;
  return {};
}

}  // namespace

Result<TrainReport> run_training(InnerTrainer& trainer, const TrainHooks& hooks) {
  GEOLOCO_TRY(validate_hooks(hooks));
  const auto start = std::chrono::steady_clock::now();
  Loop loop(trainer, hooks);
  const TrainOptions& o = trainer.options();
  loop.syncing = hooks.on_sync && (hooks.sync_every > 0 || hooks.sync_seconds > 0.0 || hooks.phase_end);
  loop.decided_by_rank0 = loop.syncing && (hooks.sync_seconds > 0.0 || hooks.phase_end);
  loop.loop_start = loop.clock();
  if (loop.syncing && loop.rank0()) loop.phase_start = loop.loop_start;
  TrainReport report;
  while (trainer.steps_done() < o.steps) {
    const double step_start = loop.clock();
    auto stats = trainer.step();
    if (!stats.ok()) return stats.status();
    if (hooks.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hooks.step_delay_ms));
    report.steps += 1;
    report.work_units += stats->work_units;
    report.last_loss = stats->loss;
    loop.loss_since_sync += stats->loss;
    loop.units_since_sync += stats->work_units;
    loop.steps_since_sync += 1;
    if (hooks.on_step) hooks.on_step(*stats);
    // The step, its delay and its log line. On the GPU the step's last
    // kernel (AdamW) may still run when step() returns; it finishes inside
    // the next copy and, before a sync, counts as held time: one kernel.
    loop.compute += loop.clock() - step_start;

    const bool last = trainer.steps_done() == o.steps;
    auto stop = loop.after_step(last);
    if (!stop.ok()) return stop.status();
    if (*stop) {  // the job is over: one more evaluation of the anchor it ended with
      GEOLOCO_TRY(evaluate_into(loop, report));
      break;
    }
    if (last || (o.eval_every > 0 && trainer.steps_done() % o.eval_every == 0))
      GEOLOCO_TRY(evaluate_into(loop, report));
  }
  if (report.steps == 0)  // nothing trained: still say where the parameters stand
    GEOLOCO_TRY(evaluate_into(loop, report));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.compute_seconds = loop.compute;
  report.eval_seconds = loop.evaluating;
  report.loop_seconds = loop.loop_seconds();
  report.compute_share = report.loop_seconds > 0.0 ? loop.compute / report.loop_seconds : 0.0;
  return report;
}

}  // namespace geoloco::inner
