#include "inner/train/train_command.h"

#include <CLI/CLI.hpp>
#include <ostream>

#include "inner/train/fault_injection.h"

namespace geoloco::inner {

namespace {

int usage_error(std::ostream& err, const Status& s) {
  err << "geoloco-train: " << s.message() << "\n";
  return 1;
}

}  // namespace

ParsedTrainCommand parse_train_command(const std::vector<std::string>& args, const EnvLookup& env, std::ostream& out,
                                       std::ostream& err) {
  std::uint64_t decay_steps_ = 0;
  std::uint64_t phase_warmup_ = 0;
  CLI::App app{"geoloco-train: the built-in inner trainer (mlp on Fashion-MNIST, gpt on the KJV Bible)"};
  TrainCommand c;
  TrainOptions& o = c.train;
  SyncedOptions& sync = c.sync;
  o.schedule.total_steps = 0;
  app.add_option("--model", o.model, "mlp or gpt")->check(CLI::IsMember({"mlp", "gpt"}));
  app.add_option("--backend", c.backend,
                 "cpu (the reference, OpenBLAS) or cuda (parameters, gradients and AdamW on the GPU; one worker "
                 "process per GPU, rank r on device r mod the visible devices, NCCL between them; exit 2 when "
                 "this binary was built without CUDA or the machine has no device)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--steps", o.steps,
                 "optimizer steps of the whole run (a trainer the daemon welcomes at step s of the job takes the "
                 "rest; also the end of the cosine unless --decay-steps)")
      ->capture_default_str();
  auto* batch_opt = app.add_option("--batch", o.batch, "samples per micro-batch per worker (mlp 64, gpt 16)");
  app.add_option("--micro-batches", o.micro_batches, "gradient accumulation per step")->capture_default_str();
  app.add_option("--lr", o.schedule.lr, "peak learning rate")->capture_default_str();
  app.add_option("--warmup", o.schedule.warmup_steps, "linear warmup steps")->capture_default_str();
  app.add_option("--decay-steps", decay_steps_, "end of the cosine decay in steps (default: --steps)");
  auto* phase_warmup_opt = app.add_option(
      "--phase-warmup", phase_warmup_,
      "with a daemon and --sync-every H: the learning rate ramps up again over this many steps at the start of "
      "every inner phase (the rate of the schedule times (step mod H + 1) / N), at most H");
  app.add_option("--min-lr-fraction", o.schedule.min_lr_fraction, "cosine floor as a fraction of --lr")
      ->capture_default_str();
  app.add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  app.add_option("--beta1", o.adamw.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", o.adamw.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--clip", o.clip_norm, "global gradient-norm bound, 0 = off")->capture_default_str();
  app.add_option("--seed", o.seed, "initialization and data order")->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "steps between evaluations (0 = at the end)")->capture_default_str();
  auto* eval_batch_opt =
      app.add_option("--eval-batch", o.eval_batch, "evaluation items per forward pass (mlp 500, gpt 32)");
  auto* eval_limit_opt =
      app.add_option("--eval-limit", o.data.eval_limit, "evaluation items used, 0 = all (mlp all, gpt 512 windows)");
  app.add_option("--hidden", o.mlp.hidden, "mlp hidden widths")->capture_default_str();
  app.add_option("--layers", o.gpt.layers, "gpt blocks")->capture_default_str();
  app.add_option("--width", o.gpt.width, "gpt embedding width")->capture_default_str();
  app.add_option("--heads", o.gpt.heads, "gpt attention heads")->capture_default_str();
  app.add_option("--context", o.gpt.context, "gpt sequence length in bytes")->capture_default_str();
  app.add_option("--data-dir", o.data.fashion_mnist_dir, "Fashion-MNIST folder")->capture_default_str();
  app.add_option("--cache-dir", o.data.cache_dir,
                 "folder for the decompressed Fashion-MNIST images, read back at the next start (default: none)");
  app.add_option("--text", o.data.text_path, "text file for gpt (default: run `bible`)");
  app.add_option("--heldout", o.data.heldout_fraction, "fraction of the text held out")->capture_default_str();
  app.add_option("--site-shard", o.data.site_shard, "this site's data shard")->capture_default_str();
  app.add_option("--site-shards", o.data.site_shards, "number of data shards (sites)")->capture_default_str();
  std::string split_name = data_split_name(o.data.split);
  app.add_option("--data-split", split_name,
                 "how the shards lie over the data: contiguous (each site its own part: non-i.i.d.) or "
                 "interleaved (every shard spread evenly over all of it: i.i.d.)")
      ->capture_default_str()
      ->check(CLI::IsMember({"contiguous", "interleaved"}));
  app.add_option("--threads", c.threads, "OpenBLAS threads per worker")->capture_default_str();
  app.add_option("--workers", c.workers, "start this many data-parallel worker processes (without a launcher)")
      ->capture_default_str();
  app.add_option("--timeout-ms", c.timeout_ms, "longest wait for a peer worker")->capture_default_str();
  app.add_option("--save-params", c.save_params, "write the final parameters (raw fp32) to this file (rank 0)");
  const char* env_socket = env("GEOLOCO_SOCKET");
  const char* env_job = env("GEOLOCO_JOB");
  sync.socket_path = env_socket ? env_socket : "";
  sync.job = env_job ? env_job : "";
  app.add_option("--sync-socket", sync.socket_path,
                 "the daemon's sync socket for this job (default: $GEOLOCO_SOCKET); rank 0 then trains in the "
                 "daemon's shared memory and hands the replica over at the end of every round's inner phase "
                 "(streaming: rank 0 trains in its own memory and copies the fragments due into the daemon's)");
  app.add_option("--job", sync.job, "the job's name, said in HELLO (default: $GEOLOCO_JOB)");
  auto* sync_every_opt =
      app.add_option("--sync-every", sync.sync_every, "inner steps per round, between syncs with the daemon (H)");
  auto* sync_seconds_opt = app.add_option(
      "--sync-seconds", sync.sync_seconds,
      "time-based rounds instead of --sync-every (the job file's inner.duration): each inner phase runs steps until "
      "this "
      "many seconds have passed on rank 0 (at least --min-steps); every worker takes the same number of steps");
  auto* min_steps_opt = app.add_option("--min-steps", sync.min_steps,
                                       "with --sync-seconds: at least this many steps "
                                       "per round")
                            ->capture_default_str();
  app.add_option("--first-round", sync.first_round,
                 "the number of a job's first round (geolocod counts from 1): a trainer welcomed at round r "
                 "without a saved state resumes its schedule and data at step (r - first round) x H")
      ->capture_default_str();
  auto* overlap_opt = app.add_option(
      "--overlap", sync.overlap_steps,
      "with a daemon, Streaming DiLoCo: inner steps (tau) a fragment's exchange overlaps; its new global values "
      "are merged this many steps after its sync (0: at once). At most the shortest phase, H / fragments");
  auto* alpha_opt = app.add_option(
      "--alpha", sync.alpha,
      "with a daemon, Streaming DiLoCo: weight in [0, 1] of the local replica when a fragment is merged, "
      "theta = alpha * local + (1 - alpha) * global (0: the global values exactly)");
  overlap_opt->capture_default_str();
  alpha_opt->capture_default_str();
  std::string merge_mode = "replace";
  auto* merge_opt =
      app.add_option(
             "--merge", merge_mode,
             "with a daemon and --overlap: how a fragment's new global values come in; replace (theta = alpha * local "
             "+ "
             "(1 - alpha) * global) or delayed (theta = global + the local progress since the sync: the delayed outer "
             "step, with --overlap up to H - 1 the next phase never waits for the exchange)")
          ->capture_default_str()
          ->check(CLI::IsMember({"replace", "delayed"}));
  app.add_option("--eval-log", sync.eval_log,
                 "with a daemon: rank 0 evaluates every anchor the daemon hands over (the first one and each "
                 "RESULT's, the final one included) and appends a JSON line {\"round\", \"eval_loss\", "
                 "\"accuracy\" (null for gpt), \"items\", \"unix_time\"} to this file; round = the round that "
                 "starts from that anchor. Streaming: the merged parameters at the end of each period (when "
                 "fragment 0 is merged) and at the stop, round = the merged round + 1");
  app.add_option("--eval-rounds", sync.eval_rounds,
                 "with --eval-log: evaluate the anchor of every Nth round only (counted from --first-round), and "
                 "always the first one and the final one; the other rounds write no line")
      ->capture_default_str();
  app.add_option("--state-dir", sync.state_dir,
                 "with a daemon: rank 0 saves the AdamW state (moments, step counts) after every sync, atomically, "
                 "to DIR/inner_state.bin tagged with the next round; a trainer welcomed at round r resumes from it "
                 "when its tag is r (and its schedule and data then continue at the saved step), else starts with "
                 "zero moments; without a state a --sync-seconds trainer restarts its schedule at step 0");
  app.footer(cat("Environment: GEOLOCO_SOCKET and GEOLOCO_JOB (defaults of --sync-socket and --job); ", kStepDelayEnv,
                 "=N: fault injection for tests, every inner step of every worker sleeps N ms (whole ms, printed "
                 "at start)."));
  app.add_flag("--bench", c.bench, "measure throughput of mlp and gpt against a plain sgemm");
  app.add_option("--bench-seconds", c.bench_seconds, "timed training per model in --bench")->capture_default_str();

  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, app.exit(e, out, err)};
  }
  if (c.bench) return {std::move(c), 0};  // --bench takes none of the training options

  // gpt activations grow with batch × context² × heads: smaller defaults.
  if (o.model == "gpt") {
    if (batch_opt->count() == 0) o.batch = 16;
    if (eval_batch_opt->count() == 0) o.eval_batch = 32;
    if (eval_limit_opt->count() == 0) o.data.eval_limit = 512;
  }
  c.synced = !sync.socket_path.empty();
  if (!c.synced) {
    // These only mean something with a daemon; silently ignoring them would hide a typo in a job's setup.
    for (const auto* opt : {sync_seconds_opt, min_steps_opt, overlap_opt, alpha_opt, phase_warmup_opt, merge_opt})
      if (opt->count() > 0)
        return {std::nullopt, usage_error(err, GEOLOCO_ERROR(Err::invalid_argument, opt->get_name(),
                                                             " needs --sync-socket (or GEOLOCO_SOCKET)"))};
    if (!sync.eval_log.empty() || !sync.state_dir.empty())
      return {std::nullopt,
              usage_error(err, GEOLOCO_ERROR(Err::invalid_argument,
                                             "--eval-log and --state-dir need --sync-socket (or GEOLOCO_SOCKET): "
                                             "they follow the daemon's rounds"))};
  } else {
    if (sync_every_opt->count() > 0 && sync_seconds_opt->count() > 0)
      return {std::nullopt,
              usage_error(err, GEOLOCO_ERROR(Err::invalid_argument,
                                             "--sync-every and --sync-seconds exclude each other: a round's inner "
                                             "phase is H steps or S seconds, not both"))};
    if (min_steps_opt->count() > 0 && sync_seconds_opt->count() == 0)
      return {std::nullopt, usage_error(err, GEOLOCO_ERROR(Err::invalid_argument,
                                                           "--min-steps applies only to --sync-seconds rounds"))};
    sync.merge_delayed = merge_mode == "delayed";
    if (phase_warmup_ > 0 && sync_seconds_opt->count() > 0)
      return {std::nullopt, usage_error(err, GEOLOCO_ERROR(Err::invalid_argument,
                                                           "--phase-warmup needs phases of H steps (--sync-every), "
                                                           "not --sync-seconds"))};
    if (phase_warmup_ > 0) {
      o.schedule.phase_steps = sync.sync_every;
      o.schedule.phase_warmup = phase_warmup_;
    }
    sync.timeout_ms = c.timeout_ms;
    if (Status s = sync.validate(); !s.ok()) return {std::nullopt, usage_error(err, s)};
  }
  o.data.split = *parse_data_split(split_name);  // the check above admits only the two names
  o.schedule.total_steps = decay_steps_ > 0 ? decay_steps_ : o.steps;
  if (o.schedule.warmup_steps > o.schedule.total_steps) o.schedule.warmup_steps = o.schedule.total_steps;
  if (Status s = o.validate(); !s.ok()) return {std::nullopt, usage_error(err, s)};
  return {std::move(c), 0};
}

}  // namespace geoloco::inner
