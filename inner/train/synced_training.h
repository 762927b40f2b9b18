// geoloco-train with its site's daemon (docs/design.md §1 step 1, §3): every rank
// calls start() and run(); rank 0 talks to the daemon (daemon_sync.h) and
// the other workers follow through the collective.
//
// start(): rank 0 connects and says HELLO; the daemon either welcomes the
// trainer with the anchor of round r (the round it trains next) or asks for
// its initialization (INIT) and answers with the anchor it settles on. The
// trainer then stands where an uninterrupted trainer of the job stands at
// the start of round r:
//   * parameters: the anchor, on every worker;
//   * schedule step and data position: the saved state's step count when
//     --state-dir holds a state of round r, else (r − first_round)·H
//     (steps_before_round), so a restart neither redoes the warmup nor
//     re-reads the data of the rounds before;
//   * AdamW: the saved moments when the state is of round r, else zero
//     moments (said on `out`).
// With --eval-log, rank 0 evaluates that first anchor and logs it.
//
// run(): run_training() whose phases end after H steps or S seconds; at
// the end of each, rank 0 syncs, saves the inner state tagged with the next
// round (--state-dir), evaluates the new anchor and logs it (--eval-log).
//
// Streaming DiLoCo (streaming.h; the WELCOME table's fragments sync in
// turn, or --overlap / --alpha are set): the trainer owns its parameters
// (RESULT writes the segment while the trainer still trains). The phase
// that ends with round R's sync is that round's share of the schedule
// (phase_steps), counted from the previous sync or the welcome; rank 0
// copies the fragments due at R into the segment and syncs them; τ steps
// later it merges θ_f ← α·θ_f(local) + (1 − α)·θ_f(global) and every rank
// continues from rank 0's parameters. After each merge rank 0 saves the
// inner state tagged with the next sync round; with --eval-log it evaluates
// the merged parameters when a period is complete (fragment 0 merged) and
// at the stop, logged as the round after the merged one. A trainer welcomed
// at round R without a state resumes at steps_through_round(R − first
// round) of the streaming schedule.
//
// The trainer comes from a TrainerFactory (inner_trainer.h): the CPU
// Trainer by default, the GPU one with geoloco-train --backend cuda. In
// plain DiLoCo the daemon's segment is the trainer's host storage on rank
// 0; in streaming the trainer's own buffer is.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>

#include "inner/train/daemon_sync.h"
#include "inner/train/eval_log.h"
#include "inner/train/run_training.h"
#include "inner/train/streaming.h"

namespace geoloco::inner {

struct SyncedOptions {
  std::string socket_path;        ///< the job's sync socket (unless `channel` is set)
  std::string job;                ///< the job's name (HELLO)
  std::uint64_t sync_every = 0;   ///< H: inner steps per round; or
  double sync_seconds = 0.0;      ///< time-based rounds: seconds of inner steps per round (excludes sync_every)
  std::uint64_t min_steps = 1;    ///< time-based: at least this many steps per round, >= 1
  std::uint64_t first_round = 1;  ///< the number of a job's first round (geolocod's rounds start at 1)
  std::string eval_log;           ///< --eval-log: JSON lines, one per anchor (eval_log.h); empty = none
  std::uint64_t eval_rounds =
      1;                  ///< --eval-rounds: with eval_log, every Nth round's anchor (and the first and the stop's)
  std::string state_dir;  ///< --state-dir: the inner state across restarts (inner_state.h); empty = none
  std::uint64_t overlap_steps = 0;  ///< --overlap: τ, inner steps a fragment's exchange overlaps (streaming)
  double alpha = 0.0;               ///< --alpha: α in [0, 1], the local replica's weight in the merge (streaming)
  bool merge_delayed = false;  ///< --merge delayed: the merge keeps the progress since the sync (delayed outer step)
  int timeout_ms = 600'000;    ///< longest wait for the daemon (and for a peer worker)
  /// How rank 0 reaches its daemon; empty: the local sync protocol over
  /// socket_path (inner/train/sync_channel.h). The simulator sets its own.
  ChannelFactory channel;

  /// Errors: invalid_argument naming the broken rule (no socket (nor
  /// channel) or job,
  /// neither or both of sync_every and sync_seconds, min_steps 0, α outside
  /// [0, 1], τ or α with sync_seconds, τ > H, …).
  Status validate() const;
};

/// The steps an uninterrupted trainer has taken when round `round` starts,
/// for a trainer without a usable saved state: steps_through_round(round −
/// first_round) of the schedule of `fragments` (streaming.h), which is
/// (round − first_round)·H for 1; 0 at or before the first round, and 0 for
/// time-based rounds (H = 0: the count is not known without the saved state).
std::uint64_t steps_before_round(std::uint64_t round, std::uint64_t first_round, std::uint64_t sync_every,
                                 std::uint32_t fragments = 1);

class SyncedTraining {
 public:
  /// Every rank calls it with the same options (see the file comment);
  /// rank 0 writes what it decided to `out`. Errors: the daemon's (refusal,
  /// timeout, io), the trainer's, the collective's, io (the eval log).
  /// `make_trainer` empty: the CPU Trainer.
  static Result<std::unique_ptr<SyncedTraining>> start(const TrainOptions& options, const SyncedOptions& sync,
                                                       Collective& collective, std::shared_ptr<const Dataset> dataset,
                                                       std::ostream& out, TrainerFactory make_trainer = {});

  /// run_training() until --steps or the daemon's stop. Of `hooks` only
  /// on_step, on_eval, clock and step_delay_ms are used; the phases, on_sync
  /// and after_sync come from the options. Errors: run_training's, the daemon's.
  Result<TrainReport> run(TrainHooks hooks);

  InnerTrainer& trainer() { return *trainer_; }
  /// The round the trainer was welcomed at (every rank).
  std::uint64_t welcome_round() const { return welcome_round_; }
  /// The step it resumed at (every rank).
  std::uint64_t resume_step() const { return resume_step_; }
  /// Whether it took over a saved inner state (every rank).
  bool state_loaded() const { return state_loaded_; }
  /// Whether it runs Streaming DiLoCo (every rank).
  bool streaming() const { return plan_.streaming; }
  /// SYNC/RESULT exchanges so far (rank 0; 0 elsewhere).
  std::uint64_t syncs() const { return daemon_ ? daemon_->syncs() : 0; }

 private:
  SyncedTraining(SyncedOptions sync, std::ostream& out) : sync_(std::move(sync)), out_(out) {}
  /// Rank 0: evaluates the parameters (the anchor of `round`) and appends
  /// the line; skipped for a round --eval-rounds passes over, unless `always`.
  Status log_anchor(std::uint64_t round, bool always);
  /// Rank 0: opens the eval log, connects, says HELLO and plans the mode.
  Status connect(const TrainOptions& options);
  Status on_sync(SyncPoint& point);
  /// Rank 0: the trainer's initial parameters become the daemon's anchor
  /// (INIT), and the anchor the daemon settles on the trainer's.
  Status take_anchor(bool anchor_ready);
  /// Streaming (rank 0): whether the phase ends after `steps`, the hand-out
  /// and the merge (run_training's phase_end, on_sync, on_merge).
  bool streaming_phase_end(std::uint64_t steps) const;
  Status hand_out(SyncPoint& point);
  Status merge(SyncPoint& point);
  /// Rank 0: saves the inner state tagged with `next_round` (--state-dir);
  /// a failed save is said on out_, not returned.
  void save_state(std::uint64_t next_round);
  /// Rank 0: the loop's seconds in steps and in all (without evaluations)
  /// since the previous sync, from its counters at this sync and at that
  /// one; the SYNC carries them to the daemon.
  protocol::SyncTiming since_last_sync(const SyncPoint& point);

  SyncedOptions sync_;
  std::ostream& out_;
  std::unique_ptr<DaemonSync> daemon_;  // rank 0
  std::unique_ptr<InnerTrainer> trainer_;
  std::unique_ptr<EvalLog> eval_log_;  // rank 0 with --eval-log
  std::uint64_t layout_digest_ = 0;
  std::uint64_t next_round_ = 0;    // rank 0: the round the last sync's anchor starts (for after_sync's log)
  bool log_after_sync_ = true;      // rank 0: whether after_sync logs it (streaming: at a period's end and the stop)
  SyncPlan plan_;                   // every rank
  std::uint64_t synced_round_ = 0;  // rank 0, streaming: the round whose fragments are (or were last) in flight
  std::uint64_t welcome_round_ = 0;
  std::uint64_t resume_step_ = 0;
  double compute_at_last_sync_ = 0.0, loop_at_last_sync_ = 0.0;  // rank 0: SyncPoint's counters
  bool state_loaded_ = false;
};

}  // namespace geoloco::inner
