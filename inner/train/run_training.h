// The training loop, and the seam through which the daemon-side sync
// protocol drives it (docs/design.md §1 step 1, §3): at the end of every inner phase
// rank 0 hands the replica out (on_sync reads params: the daemon computes the
// pseudo-gradient) and takes the new anchor in (on_sync overwrites params),
// then rank 0's parameters are broadcast so every worker continues from the
// anchor. AdamW's state stays with the worker across rounds, as DiLoCo says.
//
// The loop runs any InnerTrainer (inner_trainer.h). SyncPoint::params is
// host memory (the trainer's host_params(), the daemon's segment): on the
// GPU rank 0 copies the replica there before on_sync and the anchor back to
// the device after it, and the broadcast then runs on the device (NCCL).
//
// A phase is `sync_every` steps (the job file's inner.steps), or time-based
// (inner.duration): steps until `sync_seconds` have passed on rank 0's clock,
// at least `min_steps`. Rank 0 decides after every step and broadcasts the
// decision, so every worker takes the same number of steps (a worker that
// took one more would wait in an all-reduce nobody else joins).
//
// Streaming DiLoCo (docs/design.md §1, last paragraph; streaming.h) splits the sync
// in two: on_sync only hands the replica out (it must not change params) and
// every rank trains on; `merge_after` steps later (0: at once, before the
// next step) rank 0's on_merge takes the new global values in (it writes
// params), and the outcome, then rank 0's parameters, are broadcast as after
// a plain sync. Phases then end when rank 0's phase_end says so (its
// decision is broadcast after every step), since only rank 0 knows the
// daemon's rounds.
//
// inner/protocol/ implements on_sync with HELLO/SYNC/RESULT (synced_training.h);
// the loop knows nothing about sites or sockets.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "inner/train/inner_trainer.h"
#include "inner/train/trainer.h"  // the CPU Trainer, which most callers run

namespace geoloco::inner {

/// What rank 0's on_sync sees.
struct SyncPoint {
  std::uint64_t step = 0;        ///< trainer.steps_done() (a resumed run counts from its resume step)
  std::uint64_t sync_index = 0;  ///< 0 for the first sync of the run
  std::span<float> params;       ///< the replica, in host memory; write the new anchor here
  const ParamLayout* layout = nullptr;
  double mean_loss = 0.0;         ///< mean training loss since the previous sync
  std::uint64_t work_units = 0;   ///< samples or tokens since the previous sync (all ranks)
  std::uint64_t phase_steps = 0;  ///< steps of the phase that just ended
  double phase_seconds = 0.0;     ///< its length on rank 0's clock, from the end of the previous sync
  /// Rank 0's clock, from the start of the loop to this sync, without
  /// evaluations: in all (`loop_seconds`) and in steps (`compute_seconds`,
  /// the fault-injection delay included). The difference is the time
  /// training was held by syncs and merges: its compute share.
  double compute_seconds = 0.0;
  double loop_seconds = 0.0;
  /// Set by on_sync when the daemon says the job is over: every rank stops
  /// after this sync (with the anchor it brought) and evaluates once more.
  bool stop = false;
};

struct TrainHooks {
  std::uint64_t sync_every = 0;  ///< inner steps between syncs (H), 0 = not step-based
  double sync_seconds = 0.0;     ///< time-based phases: seconds each (rank 0's clock), 0 = off; not with sync_every
  std::uint64_t min_steps = 1;   ///< time-based phases: at least this many steps each, >= 1
  /// Rank 0 only: whether the phase ends after `phase_steps` steps. When
  /// set it replaces sync_every and sync_seconds, and its decision is
  /// broadcast after every step (streaming: the phase lengths follow the
  /// daemon's rounds, which only rank 0 hears).
  std::function<bool(std::uint64_t phase_steps)> phase_end;
  /// Rank 0 only. An error stops every rank (it is broadcast first).
  std::function<Status(SyncPoint&)> on_sync;
  /// Streaming: when set, on_sync only reads params (hands the replica out)
  /// and this, on rank 0, `merge_after` steps after the sync, writes the
  /// merged parameters into params (SyncPoint of the sync, with params the
  /// replica now; stop as on_sync's). A run that reaches its last step with
  /// a merge pending merges then. An error stops every rank.
  std::function<Status(SyncPoint&)> on_merge;
  std::uint64_t merge_after = 0;  ///< τ: steps between a sync and its merge
  /// Rank 0 only, after on_sync (streaming: on_merge), once its anchor is
  /// the trainer's parameters (on the device too) and before the broadcast:
  /// e.g. evaluate the anchor: its time counts as evaluation, not as time
  /// the sync held training (TrainReport::compute_share).
  /// An error stops every rank, as on_sync's.
  std::function<Status(const SyncPoint&)> after_sync;
  /// Rank 0's clock (phase lengths; the end of time-based phases), in
  /// seconds from any origin; empty = std::chrono::steady_clock. Tests pass their own.
  std::function<double()> clock;
  /// Fault injection (fault_injection.h): every rank sleeps this long after
  /// every step, inside the phase's time.
  std::uint64_t step_delay_ms = 0;
  /// Every rank, after every step (for logs).
  std::function<void(const StepStats&)> on_step;
  /// Every rank, after every evaluation.
  std::function<void(std::uint64_t step, const EvalResult&)> on_eval;
};

struct TrainReport {
  std::uint64_t steps = 0;       ///< steps this run took (not counting a resume offset)
  std::uint64_t work_units = 0;  ///< over all ranks
  double last_loss = 0.0;        ///< training loss of the last step
  EvalResult eval;               ///< the final evaluation
  double seconds = 0.0;          ///< wall time of the loop (evaluations included)
  // On the loop's clock (TrainHooks::clock):
  double compute_seconds = 0.0;  ///< in steps (the fault-injection delay included)
  double eval_seconds = 0.0;     ///< in evaluations (after_sync's included)
  double loop_seconds = 0.0;     ///< the loop's time without evaluations
  /// compute_seconds over loop_seconds: the share of
  /// it this worker computed rather than waited for syncs and merges (0
  /// when no time passed).
  double compute_share = 0.0;
};

/// Whether the inner phase ends after a step, given the steps it has taken
/// and the seconds since it began: sync_every steps, or (time-based) at
/// least sync_seconds and min_steps. Never with neither set. A pure
/// function: rank 0 calls it with its clock, tests with chosen numbers.
bool phase_over(const TrainHooks& hooks, std::uint64_t phase_steps, double phase_seconds);

/// Errors: invalid_argument when two of sync_every, sync_seconds and
/// phase_end are set, sync_seconds is negative or not finite, or min_steps
/// is 0.
Status validate_hooks(const TrainHooks& hooks);

/// Runs steps until trainer.steps_done() reaches trainer.options().steps
/// (a trainer resumed at step s takes steps − s more), with evaluations every
/// eval_every steps and at the end, and a sync at the end of every phase
/// when on_sync is set. Errors: validate_hooks', the trainer's, on_sync's.
Result<TrainReport> run_training(InnerTrainer& trainer, const TrainHooks& hooks = {});

}  // namespace geoloco::inner
