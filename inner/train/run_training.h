// The training loop, and the seam through which the daemon-side sync
// protocol drives it (DESIGN §1 step 1, §3): every `sync_every` steps rank 0
// hands the replica out (on_sync reads params: the daemon computes the
// pseudo-gradient) and takes the new anchor in (on_sync overwrites params),
// then rank 0's parameters are broadcast so every worker continues from the
// anchor. AdamW's state stays with the worker across rounds, as DiLoCo says.
//
// inner/protocol/ implements on_sync with HELLO/SYNC/RESULT; the loop knows
// nothing about sites or sockets.
#pragma once

#include <cstdint>
#include <functional>

#include "inner/train/trainer.h"

namespace geoloco::inner {

/// What rank 0's on_sync sees.
struct SyncPoint {
  std::uint64_t step = 0;           ///< steps done so far (a multiple of sync_every)
  std::uint64_t sync_index = 0;     ///< 0 for the first sync of the run
  std::span<float> params;          ///< the replica; write the new anchor here
  const ParamLayout* layout = nullptr;
  double mean_loss = 0.0;           ///< mean training loss since the previous sync
  std::uint64_t work_units = 0;     ///< samples or tokens since the previous sync (all ranks)
  /// Set by on_sync when the daemon says the job is over: every rank stops
  /// after this sync (with the anchor it brought) and evaluates once more.
  bool stop = false;
};

struct TrainHooks {
  std::uint64_t sync_every = 0;  ///< inner steps between syncs (H), 0 = never
  /// Rank 0 only. An error stops every rank (it is broadcast first).
  std::function<Status(SyncPoint&)> on_sync;
  /// Every rank, after every step (for logs).
  std::function<void(const StepStats&)> on_step;
  /// Every rank, after every evaluation.
  std::function<void(std::uint64_t step, const EvalResult&)> on_eval;
};

struct TrainReport {
  std::uint64_t steps = 0;
  std::uint64_t work_units = 0;   ///< over all ranks
  double last_loss = 0.0;         ///< training loss of the last step
  EvalResult eval;                ///< the final evaluation
  double seconds = 0.0;           ///< wall time of the loop (evaluations included)
};

/// Runs trainer.options().steps steps with evaluations every eval_every
/// steps and at the end. Errors: the trainer's, on_sync's.
Result<TrainReport> run_training(Trainer& trainer, const TrainHooks& hooks = {});

}  // namespace geoloco::inner
