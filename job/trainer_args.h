// How the daemon starts the built-in trainer for one job on one site: the
// arguments of geoloco-train, as data. builtin_trainer_options()
// (job/job_trainer.h) fills them from the job file; TrainerProcess runs
// them; `geoloco simulate` parses the same arguments with geoloco-train's
// own parser (inner/train/train_command.h), so a simulated site trains as a
// real one. No processes here, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::job {

/// What geoloco-train is started with. Fields map one to one onto its flags
/// (inner/train/train_command.h); 0 or empty leaves the trainer's default.
struct TrainerArgs {
  std::string program = "geoloco-train";  ///< path of the binary (PATH is searched when it has no '/')
  std::string socket_path;                ///< the job's sync socket -> GEOLOCO_SOCKET
  std::string job;                        ///< the job's name -> GEOLOCO_JOB
  std::string log_path;                   ///< stdout and stderr are appended here, e.g. <job dir>/trainer.log

  std::string model = "mlp";            ///< --model: mlp | gpt
  std::vector<std::size_t> hidden;      ///< --hidden (mlp hidden widths)
  int layers = 0;                       ///< --layers (gpt blocks)
  int width = 0;                        ///< --width (gpt embedding width)
  int heads = 0;                        ///< --heads (gpt)
  int context = 0;                      ///< --context (gpt sequence length in bytes)
  std::uint64_t steps = 0;              ///< --steps: inner steps a run may take (the daemon stops it earlier)
  std::uint64_t batch = 0;              ///< --batch: samples per micro-batch per worker
  double lr = 0;                        ///< --lr: peak inner learning rate
  std::optional<std::uint64_t> warmup;  ///< --warmup: linear warmup steps (unset: the trainer's default)
  std::uint64_t decay_steps = 0;        ///< --decay-steps: end of the cosine (0: --steps)
  std::uint64_t phase_warmup = 0;       ///< --phase-warmup: the lr's ramp at each phase's start (0: none)
  std::optional<std::uint64_t> seed;    ///< --seed: initialization and data order; every site of a job uses the job's
  std::uint64_t sync_every = 1;         ///< --sync-every: H, inner steps per round, >= 1 (unless sync_seconds)
  double sync_seconds = 0;              ///< --sync-seconds: time-based rounds instead (inner.duration); 0 = off
  std::uint64_t min_steps = 0;          ///< --min-steps with sync_seconds (0: the trainer's default)
  std::uint64_t overlap_steps = 0;     ///< --overlap: Streaming DiLoCo's τ, inner steps a fragment's exchange overlaps
  double alpha = 0;                    ///< --alpha: Streaming DiLoCo's α in [0, 1], the local replica's merge weight
  bool merge_delayed = false;          ///< --merge delayed: the delayed outer step's merge
  std::optional<double> weight_decay;  ///< --weight-decay: AdamW decoupled weight decay
  std::optional<double> clip;          ///< --clip: global gradient-norm bound, 0 = off
  std::string eval_log;                ///< --eval-log: the trainer evaluates every anchor into this file
  std::string state_dir;               ///< --state-dir: AdamW state kept across trainer restarts
  std::string cache_dir;               ///< --cache-dir: decompressed dataset kept for the next start
  std::string backend;                 ///< --backend: cpu | cuda (empty: the trainer's default, cpu)
  /// GPUs the trainer may use (the site file's `gpus`): CUDA_VISIBLE_DEVICES
  /// in its environment; empty leaves the variable as the daemon has it.
  std::vector<int> visible_gpus;
  std::uint32_t site_shard = 0;         ///< --site-shard: this site's data shard, < site_shards
  std::uint32_t site_shards = 1;        ///< --site-shards: sites sharing the data
  std::string data_split;               ///< --data-split: contiguous | interleaved (empty: contiguous)
  std::uint32_t workers = 1;            ///< --workers: data-parallel worker processes
  std::uint64_t eval_limit = 0;         ///< --eval-limit: evaluation items (0: the trainer's default)
  std::uint64_t eval_rounds = 1;        ///< --eval-rounds: evaluate every Nth round's anchor (and the first and last)
  std::vector<std::string> extra_args;  ///< appended verbatim (e.g. --data-dir)
  /// A user's trainer (the job's trainer.kind command): this argument vector
  /// runs as it is, program first, instead of geoloco-train's; the fields
  /// above but the socket, job, log path and shards are not used.
  std::vector<std::string> command;

  /// Errors: invalid_argument naming the rule (empty program, socket or job,
  /// sync_every 0, site_shard >= site_shards, workers 0, alpha outside [0, 1]).
  Status validate() const;
};

/// geoloco-train's argument vector for `args` (argv[0] is the program), or
/// the user's `command`; the socket, the job and the site's shard travel in
/// GEOLOCO_SOCKET, GEOLOCO_JOB, GEOLOCO_SITE_SHARD and GEOLOCO_SITE_SHARDS.
std::vector<std::string> trainer_arguments(const TrainerArgs& args);

}  // namespace geoloco::job
