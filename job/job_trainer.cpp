#include "job/job_trainer.h"

#include <algorithm>
#include <filesystem>

namespace geoloco::job {

std::string sync_socket_path(const std::string& job_dir) {
  return (std::filesystem::path(job_dir) / "sync.sock").string();
}

Result<TrainerArgs> builtin_trainer_options(const JobSpec& job, const std::string& site, const TrainerPaths& paths) {
  GEOLOCO_RETURN_IF(job.trainer.kind != TrainerSpec::Kind::builtin, Err::invalid_argument, "job '", job.name,
                    "' has an external trainer: the daemon starts none, it waits for one to attach");
  const auto it = std::find(job.sites.begin(), job.sites.end(), site);
  GEOLOCO_RETURN_IF(it == job.sites.end(), Err::invalid_argument, "site '", site, "' is not one of job '", job.name,
                    "''s sites");
  const std::uint64_t h = job.outer.inner.steps;
  TrainerArgs o;
  o.program = paths.program;
  o.socket_path = sync_socket_path(paths.job_dir);
  o.job = job.name;
  o.log_path = (std::filesystem::path(paths.job_dir) / "trainer.log").string();
  o.model = job.trainer.model;
  if (job.trainer.model == "mlp") {
    o.hidden.assign(static_cast<std::size_t>(std::max(job.trainer.layers - 1, 1)),
                    static_cast<std::size_t>(job.trainer.width));
  } else {
    o.layers = job.trainer.layers;
    o.width = job.trainer.width;
    o.heads = job.trainer.heads;
    o.context = job.trainer.context;
  }
  // Room for every round (a stop by tokens may take more: leave it unbounded).
  // With a time budget the step count is unknown: leave it unbounded.
  const bool timed = job.outer.inner.duration_s > 0;
  o.steps = job.stop_rounds && !timed ? *job.stop_rounds * h + h : 1'000'000'000ull;
  // The cosine ends with the job's last round (not with the spare room
  // above), as a data-parallel run of the same steps would schedule it.
  if (job.stop_rounds && !timed) o.decay_steps = *job.stop_rounds * h;
  o.batch = job.inner.batch;
  o.lr = job.inner.lr;
  o.warmup = job.inner.warmup;
  o.phase_warmup = job.inner.phase_warmup;
  o.seed = job.seed;  // every site starts from the same initialization
  o.sync_every = h;
  if (timed) {
    o.sync_seconds = job.outer.inner.duration_s;
    o.min_steps = job.outer.inner.min_steps;
  }
  // Streaming DiLoCo: the trainer overlaps each fragment's exchange with τ
  // steps and merges with α (the fragments come with its WELCOME).
  o.overlap_steps = job.outer.streaming.overlap_steps;
  o.alpha = job.outer.streaming.alpha;
  o.merge_delayed = job.outer.streaming.delayed;
  o.weight_decay = job.inner.weight_decay;
  o.clip = job.inner.clip;
  o.eval_log = (std::filesystem::path(paths.job_dir) / "eval.jsonl").string();
  o.eval_rounds = job.trainer.eval_rounds;
  o.eval_limit = job.trainer.eval_items;
  o.state_dir = (std::filesystem::path(paths.job_dir) / "trainer-state").string();
  // A restarted trainer reads the images back instead of decompressing them again.
  if (o.model == "mlp") o.cache_dir = (std::filesystem::path(paths.job_dir) / "dataset-cache").string();
  o.site_shard = static_cast<std::uint32_t>(it - job.sites.begin());
  o.site_shards = static_cast<std::uint32_t>(job.sites.size());
  if (job.trainer.data != "contiguous") o.data_split = job.trainer.data;
  o.workers = static_cast<std::uint32_t>(job.trainer.workers);
  if (!paths.gpus.empty()) {
    o.backend = "cuda";
    o.visible_gpus = paths.gpus;
    o.workers = static_cast<std::uint32_t>(paths.gpus.size());
  }
  GEOLOCO_TRY(o.validate());
  return o;
}

Result<TrainerArgs> command_trainer_options(const JobSpec& job, const std::string& site, const TrainerPaths& paths) {
  GEOLOCO_RETURN_IF(job.trainer.kind != TrainerSpec::Kind::command || job.trainer.command.empty(),
                    Err::invalid_argument, "job '", job.name, "' has no trainer command to run");
  const auto it = std::find(job.sites.begin(), job.sites.end(), site);
  GEOLOCO_RETURN_IF(it == job.sites.end(), Err::invalid_argument, "site '", site, "' is not one of job '", job.name,
                    "''s sites");
  TrainerArgs o;
  o.command = job.trainer.command;
  o.program = job.trainer.command.front();
  o.socket_path = sync_socket_path(paths.job_dir);
  o.job = job.name;
  o.log_path = (std::filesystem::path(paths.job_dir) / "trainer.log").string();
  o.site_shard = static_cast<std::uint32_t>(it - job.sites.begin());
  o.site_shards = static_cast<std::uint32_t>(job.sites.size());
  o.visible_gpus = paths.gpus;
  GEOLOCO_TRY(o.validate());
  return o;
}

}  // namespace geoloco::job
