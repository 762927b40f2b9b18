// How a job file's trainer section becomes the built-in trainer's process
// on one site: model and sizes, the inner optimizer, H (sync_every), this
// site's data shard among the job's sites, and the files under the job's
// directory. A pure function, so the mapping is tested by value.
#pragma once

#include <string>

#include "common/status.h"
#include "job/job_spec.h"
#include "job/trainer_args.h"

namespace geoloco::job {

struct TrainerPaths {
  std::string program = "geoloco-train";  ///< the trainer binary
  std::string job_dir;                    ///< <data_dir>/jobs/<job>
  /// The site file's `gpus`: with any, the trainer runs on them (--backend
  /// cuda, one worker per GPU, CUDA_VISIBLE_DEVICES); without, on the CPU
  /// with the job's `workers`.
  std::vector<int> gpus;
};

/// The sync socket of a job: <job_dir>/sync.sock.
std::string sync_socket_path(const std::string& job_dir);

/// The process options for `site`'s built-in trainer. Steps: enough for
/// every round of the job (rounds x H, or unbounded with a token stop or a
/// time budget), so the trainer never ends before the daemon says stop;
/// inner.duration becomes --sync-seconds; the trainer keeps its eval log
/// (<job_dir>/eval.jsonl) and its AdamW state (<job_dir>/trainer-state)
/// in the job's folder. Errors: invalid_argument (the job's trainer is
/// external, or `site` is not one of the job's sites).
Result<TrainerArgs> builtin_trainer_options(const JobSpec& job, const std::string& site, const TrainerPaths& paths);

/// The process options for `site`'s trainer of kind command: the job's
/// command as it is, its log (<job_dir>/trainer.log), the job's socket and
/// the site's shard (its place among the job's sites). Errors:
/// invalid_argument (another kind, or `site` is not one of the job's sites).
Result<TrainerArgs> command_trainer_options(const JobSpec& job, const std::string& site, const TrainerPaths& paths);

}  // namespace geoloco::job
