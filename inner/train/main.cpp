// geoloco-train: the built-in inner trainer (DESIGN §2). Trains `mlp` on
// Fashion-MNIST or `gpt` on the King James Bible for N steps, data parallel
// over the worker processes its launcher started (mpirun, srun, or its own
// --workers), and prints evaluation loss (and accuracy). With a daemon
// (--sync-socket, as geolocod starts it) it trains the job's rounds
// (synced_training.h). --backend cuda trains on GPUs, one process per GPU
// (backend.h). --bench measures the CPU backend against a plain sgemm.
// Only this file decides to exit: 0 done, 1 failed, 2 the backend cannot
// run here (built without CUDA, or no CUDA device).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/digest.h"
#include "inner/collective/launch.h"
#include "inner/cpu/blas.h"
#include "inner/train/backend.h"
#include "inner/train/bench.h"
#include "inner/train/fault_injection.h"
#include "inner/train/run_training.h"
#include "inner/train/synced_training.h"

namespace {

using namespace geoloco;
using namespace geoloco::inner;

// Starts `workers` copies of this program as ranks 0..workers-1 (the
// environment a launcher would set), waits for them, and stops the rest
// when one fails so nobody waits for a dead peer until the timeout.
int spawn_workers(int workers, char** argv) {
  const std::string run_id = cat("train-", ::getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < workers; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      ::setenv("GEOLOCO_RANK", std::to_string(r).c_str(), 1);
      ::setenv("GEOLOCO_WORLD_SIZE", std::to_string(workers).c_str(), 1);
      ::setenv("GEOLOCO_LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("GEOLOCO_LOCAL_WORLD_SIZE", std::to_string(workers).c_str(), 1);
      ::setenv("GEOLOCO_RUN_ID", run_id.c_str(), 1);
      ::execv("/proc/self/exe", argv);
      std::perror("execv /proc/self/exe");
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int failures = 0;
  for (std::size_t left = pids.size(); left > 0; --left) {
    int status = 0;
    const pid_t done = ::wait(&status);
    if (done < 0) break;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (failures++ == 0) {
        std::cerr << "geoloco-train: worker pid " << done << " failed; stopping the others\n";
        for (pid_t p : pids)
          if (p != done) ::kill(p, SIGTERM);
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

// Where ranks other than 0 write what rank 0 tells the user.
std::ostream& null_stream() {
  static std::ostream sink(nullptr);
  return sink;
}

int fail(const Status& s) {
  std::cerr << "geoloco-train: " << s.message() << "\n";
  return 1;
}

// check_backend's refusal: exit 2 when this binary or machine cannot run it.
int fail_backend(const std::string& backend, const Status& s) {
  std::cerr << "geoloco-train: --backend " << backend << ": " << s.message() << "\n";
  return s.code() == Err::unsupported ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"geoloco-train: the built-in inner trainer (mlp on Fashion-MNIST, gpt on the KJV Bible)"};
  TrainOptions o;
  o.schedule.total_steps = 0;
  bool bench = false;
  double bench_seconds = 10.0;
  int threads = 1, workers = 1, timeout_ms = 600'000;
  std::uint64_t decay_steps = 0;
  std::string save_params;
  std::string backend = "cpu";
  app.add_option("--model", o.model, "mlp or gpt")->check(CLI::IsMember({"mlp", "gpt"}));
  app.add_option("--backend", backend,
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
  app.add_option("--decay-steps", decay_steps, "end of the cosine decay in steps (default: --steps)");
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
  app.add_option("--text", o.data.text_path, "text file for gpt (default: run `bible`)");
  app.add_option("--heldout", o.data.heldout_fraction, "fraction of the text held out")->capture_default_str();
  app.add_option("--site-shard", o.data.site_shard, "this site's data shard")->capture_default_str();
  app.add_option("--site-shards", o.data.site_shards, "number of data shards (sites)")->capture_default_str();
  app.add_option("--threads", threads, "OpenBLAS threads per worker")->capture_default_str();
  app.add_option("--workers", workers, "start this many data-parallel worker processes (without a launcher)")
      ->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms, "longest wait for a peer worker")->capture_default_str();
  app.add_option("--save-params", save_params, "write the final parameters (raw fp32) to this file (rank 0)");
  const char* env_socket = std::getenv("GEOLOCO_SOCKET");
  const char* env_job = std::getenv("GEOLOCO_JOB");
  SyncedOptions sync;
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
      "time-based rounds instead of --sync-every (DESIGN's inner.duration): each inner phase runs steps until this "
      "many seconds have passed on rank 0 (at least --min-steps); every worker takes the same number of steps");
  auto* min_steps_opt = app.add_option("--min-steps", sync.min_steps, "with --sync-seconds: at least this many steps "
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
  app.add_option("--eval-log", sync.eval_log,
                 "with a daemon: rank 0 evaluates every anchor the daemon hands over (the first one and each "
                 "RESULT's, the final one included) and appends a JSON line {\"round\", \"eval_loss\", "
                 "\"accuracy\" (null for gpt), \"items\", \"unix_time\"} to this file; round = the round that "
                 "starts from that anchor. Streaming: the merged parameters at the end of each period (when "
                 "fragment 0 is merged) and at the stop, round = the merged round + 1");
  app.add_option("--state-dir", sync.state_dir,
                 "with a daemon: rank 0 saves the AdamW state (moments, step counts) after every sync, atomically, "
                 "to DIR/inner_state.bin tagged with the next round; a trainer welcomed at round r resumes from it "
                 "when its tag is r (and its schedule and data then continue at the saved step), else starts with "
                 "zero moments; without a state a --sync-seconds trainer restarts its schedule at step 0");
  app.footer(cat("Environment: GEOLOCO_SOCKET and GEOLOCO_JOB (defaults of --sync-socket and --job); ", kStepDelayEnv,
                 "=N: fault injection for tests, every inner step of every worker sleeps N ms (whole ms, printed "
                 "at start)."));
  app.add_flag("--bench", bench, "measure throughput of mlp and gpt against a plain sgemm");
  app.add_option("--bench-seconds", bench_seconds, "timed training per model in --bench")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // Before anything starts (workers, data): can this binary, here, run it?
  if (Status s = check_backend(backend); !s.ok()) return fail_backend(backend, s);
  if (bench && backend != "cpu")
    return fail(GEOLOCO_ERROR(Err::invalid_argument,
                              "--bench measures the CPU backend; geoloco-gpu-bench measures the CUDA one"));
  if (bench) {
    BenchOptions b;
    b.seconds_per_model = bench_seconds;
    b.threads = threads;
    b.mlp.data = o.data;
    b.gpt.data.text_path = o.data.text_path;
    auto r = run_bench(b, std::cout);
    return r.ok() ? 0 : fail(r.status());
  }

  // gpt activations grow with batch × context² × heads: smaller defaults.
  if (o.model == "gpt") {
    if (batch_opt->count() == 0) o.batch = 16;
    if (eval_batch_opt->count() == 0) o.eval_batch = 32;
    if (eval_limit_opt->count() == 0) o.data.eval_limit = 512;
  }
  // Fault injection (a test's straggler): refused here, before any worker starts, when it is not a number.
  const char* delay_env = std::getenv(kStepDelayEnv);
  auto step_delay_ms = parse_step_delay_ms(delay_env);
  if (!step_delay_ms.ok()) return fail(step_delay_ms.status());
  const bool synced = !sync.socket_path.empty();
  if (!synced) {
    // These only mean something with a daemon; silently ignoring them would hide a typo in a job's setup.
    for (const auto* opt : {sync_seconds_opt, min_steps_opt, overlap_opt, alpha_opt})
      if (opt->count() > 0)
        return fail(GEOLOCO_ERROR(Err::invalid_argument, opt->get_name(), " needs --sync-socket (or GEOLOCO_SOCKET)"));
    if (!sync.eval_log.empty() || !sync.state_dir.empty())
      return fail(GEOLOCO_ERROR(Err::invalid_argument,
                                "--eval-log and --state-dir need --sync-socket (or GEOLOCO_SOCKET): they follow the "
                                "daemon's rounds"));
  } else {
    if (sync_every_opt->count() > 0 && sync_seconds_opt->count() > 0)
      return fail(GEOLOCO_ERROR(Err::invalid_argument,
                                "--sync-every and --sync-seconds exclude each other: a round's inner phase is H steps "
                                "or S seconds, not both"));
    if (min_steps_opt->count() > 0 && sync_seconds_opt->count() == 0)
      return fail(GEOLOCO_ERROR(Err::invalid_argument, "--min-steps applies only to --sync-seconds rounds"));
    sync.timeout_ms = timeout_ms;
    if (Status s = sync.validate(); !s.ok()) return fail(s);
  }
  auto launch = launch_info_from_env();
  if (!launch.ok()) return fail(launch.status());
  if (workers > 1 && launch->launcher == "none") return spawn_workers(workers, argv);

  o.schedule.total_steps = decay_steps > 0 ? decay_steps : o.steps;
  if (o.schedule.warmup_steps > o.schedule.total_steps) o.schedule.warmup_steps = o.schedule.total_steps;
  if (Status s = o.validate(); !s.ok()) return fail(s);
  cpu::set_blas_threads(threads);
  BackendOptions bopts;
  bopts.name = backend;
  bopts.timeout_ms = timeout_ms;
  auto made_backend = make_backend(bopts, *launch);
  if (!made_backend.ok()) return fail(made_backend.status());
  Backend& site = **made_backend;  // outlives the trainers below (declared first)
  Collective& collective = site.collective();
  const bool talk = collective.rank() == 0;
  if (talk && delay_env != nullptr)
    std::cout << "fault injection: " << kStepDelayEnv << "=" << *step_delay_ms << " (every inner step sleeps "
              << *step_delay_ms << " ms)" << std::endl;
  auto data = load_dataset(o);
  if (!data.ok()) return fail(data.status());
  // With a daemon, every rank starts where the job stands (synced_training.h).
  std::unique_ptr<SyncedTraining> synced_run;
  std::unique_ptr<InnerTrainer> plain;
  if (synced) {
    auto started =
        SyncedTraining::start(o, sync, collective, *data, talk ? std::cout : null_stream(), site.trainer_factory());
    if (!started.ok()) return fail(started.status());
    synced_run = std::move(*started);
  } else {
    auto created = site.trainer_factory()(o, collective, *data, {}, /*initialize=*/true);
    if (!created.ok()) return fail(created.status());
    plain = std::move(*created);
  }
  InnerTrainer& trainer = synced_run ? synced_run->trainer() : *plain;
  if (talk)
    std::cout << "geoloco-train: " << o.model << ", " << trainer.layout().total() << " parameters, "
              << (*data)->describe() << ", " << collective.size() << " worker(s) [" << collective.backend()
              << ", launcher " << launch->launcher << "], " << site.describe() << ", batch " << o.batch << " x "
              << o.micro_batches << " micro-batch(es) per worker" << std::endl;

  TrainHooks hooks;
  const bool mlp = o.model == "mlp";
  hooks.on_step = [&](const StepStats& s) {
    if (talk && (s.step % 50 == 0 || s.step + 1 == o.steps))
      std::printf("step %6llu  loss %.4f  lr %.3g  grad norm %.3f\n", static_cast<unsigned long long>(s.step + 1),
                  s.loss, s.lr, s.grad_norm);
  };
  hooks.on_eval = [&](std::uint64_t step, const EvalResult& e) {
    if (!talk) return;
    if (mlp)
      std::printf("step %6llu  eval loss %.4f  accuracy %.2f%% (%zu/%zu)\n", static_cast<unsigned long long>(step),
                  e.loss, 100.0 * static_cast<double>(e.correct) / static_cast<double>(e.predictions), e.correct,
                  e.predictions);
    else
      std::printf("step %6llu  eval loss %.4f nats/byte (%.3f bits/byte) on %zu held-out bytes\n",
                  static_cast<unsigned long long>(step), e.loss, e.loss / 0.6931471805599453, e.predictions);
    std::fflush(stdout);
  };
  hooks.step_delay_ms = *step_delay_ms;
  auto report = synced_run ? synced_run->run(hooks) : run_training(trainer, hooks);
  if (!report.ok()) return fail(report.status());
  if (talk) {
    if (Status s = trainer.params_to_host(); !s.ok()) return fail(s);  // a copy from the GPU; nothing on the CPU
    const auto params = trainer.host_params();
    if (synced_run)
      std::printf("synced with the daemon %llu times\n", static_cast<unsigned long long>(synced_run->syncs()));
    std::printf("done: %llu steps, %.1f s, %.0f %s/s, params digest %s\n",
                static_cast<unsigned long long>(report->steps), report->seconds,
                static_cast<double>(report->work_units) / report->seconds,
                trainer.model().work_unit_name().c_str(), digest_hex(digest_f32(params)).c_str());
    if (!save_params.empty()) {
      std::ofstream f(save_params, std::ios::binary);
      f.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size_bytes()));
      if (!f) return fail(GEOLOCO_ERROR(Err::io, "cannot write ", save_params));
    }
  }
  return 0;
}
