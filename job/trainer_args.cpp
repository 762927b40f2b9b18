#include "job/trainer_args.h"

#include <charconv>

namespace geoloco::job {

namespace {

// The shortest text that reads back as the same double (0.05, not 0.050000000000000003).
std::string number(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

Status TrainerArgs::validate() const {
  GEOLOCO_RETURN_IF(program.empty(), Err::invalid_argument,
                    "trainer: program must name the geoloco-train binary (or the command's program)");
  GEOLOCO_RETURN_IF(socket_path.empty(), Err::invalid_argument, "trainer: socket_path must be set");
  GEOLOCO_RETURN_IF(job.empty(), Err::invalid_argument, "trainer: job must be set");
  GEOLOCO_RETURN_IF(site_shards == 0 || site_shard >= site_shards, Err::invalid_argument, "trainer: site_shard ",
                    site_shard, " must be below site_shards ", site_shards);
  if (!command.empty()) {
    GEOLOCO_RETURN_IF(command.front().empty(), Err::invalid_argument, "trainer: the command's program is empty");
    return {};
  }
  GEOLOCO_RETURN_IF(model != "mlp" && model != "gpt", Err::invalid_argument, "trainer: model must be mlp or gpt, not '",
                    model, "'");
  GEOLOCO_RETURN_IF(sync_every == 0 && sync_seconds <= 0, Err::invalid_argument,
                    "trainer: sync_every (H) must be at least 1, or sync_seconds > 0");
  GEOLOCO_RETURN_IF(sync_seconds < 0, Err::invalid_argument, "trainer: sync_seconds must be >= 0");
  GEOLOCO_RETURN_IF(workers == 0, Err::invalid_argument, "trainer: workers must be at least 1");
  GEOLOCO_RETURN_IF(!(lr >= 0), Err::invalid_argument, "trainer: lr must be >= 0 (0: the trainer's default)");
  GEOLOCO_RETURN_IF(!(alpha >= 0 && alpha <= 1), Err::invalid_argument,
                    "trainer: alpha (streaming's merge weight of the local replica) must be in [0, 1], got ", alpha);
  GEOLOCO_RETURN_IF(layers < 0 || width < 0 || heads < 0 || context < 0, Err::invalid_argument,
                    "trainer: model sizes must be >= 0 (0: the trainer's default)");
  return {};
}

std::vector<std::string> trainer_arguments(const TrainerArgs& o) {
  if (!o.command.empty()) return o.command;
  std::vector<std::string> a{o.program, "--model", o.model};
  auto add = [&a](const char* flag, const std::string& value) {
    a.emplace_back(flag);
    a.push_back(value);
  };
  if (!o.hidden.empty()) {
    a.emplace_back("--hidden");
    for (std::size_t w : o.hidden) a.push_back(std::to_string(w));
  }
  if (o.layers > 0) add("--layers", std::to_string(o.layers));
  if (o.width > 0) add("--width", std::to_string(o.width));
  if (o.heads > 0) add("--heads", std::to_string(o.heads));
  if (o.context > 0) add("--context", std::to_string(o.context));
  if (o.steps > 0) add("--steps", std::to_string(o.steps));
  if (o.batch > 0) add("--batch", std::to_string(o.batch));
  if (o.lr > 0) add("--lr", number(o.lr));
  if (o.warmup) add("--warmup", std::to_string(*o.warmup));
  if (o.decay_steps > 0) add("--decay-steps", std::to_string(o.decay_steps));
  if (o.phase_warmup > 0) add("--phase-warmup", std::to_string(o.phase_warmup));
  if (o.seed) add("--seed", std::to_string(*o.seed));
  if (o.sync_seconds > 0) {
    add("--sync-seconds", number(o.sync_seconds));
    if (o.min_steps > 0) add("--min-steps", std::to_string(o.min_steps));
  } else {
    add("--sync-every", std::to_string(o.sync_every));
  }
  // Only when set: a plain DiLoCo job's command line stays what it was.
  if (o.overlap_steps > 0) add("--overlap", std::to_string(o.overlap_steps));
  if (o.alpha > 0) add("--alpha", number(o.alpha));
  if (o.merge_delayed) add("--merge", "delayed");
  if (o.weight_decay) add("--weight-decay", number(*o.weight_decay));
  if (o.clip) add("--clip", number(*o.clip));
  if (!o.eval_log.empty()) add("--eval-log", o.eval_log);
  if (!o.state_dir.empty()) add("--state-dir", o.state_dir);
  if (!o.cache_dir.empty()) add("--cache-dir", o.cache_dir);
  if (!o.backend.empty()) add("--backend", o.backend);
  add("--site-shard", std::to_string(o.site_shard));
  add("--site-shards", std::to_string(o.site_shards));
  if (!o.data_split.empty()) add("--data-split", o.data_split);
  if (o.workers > 1) add("--workers", std::to_string(o.workers));
  if (o.eval_limit > 0) add("--eval-limit", std::to_string(o.eval_limit));
  if (o.eval_rounds > 1) add("--eval-rounds", std::to_string(o.eval_rounds));
  for (const auto& e : o.extra_args) a.push_back(e);
  return a;
}

}  // namespace geoloco::job
