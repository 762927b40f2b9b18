// geoloco-train: the built-in inner trainer (DESIGN §2). Trains `mlp` on
// Fashion-MNIST or `gpt` on the King James Bible for N steps, data parallel
// over the worker processes its launcher started (mpirun, srun, or its own
// --workers), and prints evaluation loss (and accuracy). --bench measures
// throughput against a plain sgemm. Only this file decides to exit.
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
#include "inner/collective/shm_collective.h"
#include "inner/cpu/blas.h"
#include "inner/train/bench.h"
#include "inner/train/daemon_sync.h"
#include "inner/train/run_training.h"

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

int fail(const Status& s) {
  std::cerr << "geoloco-train: " << s.message() << "\n";
  return 1;
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
  app.add_option("--model", o.model, "mlp or gpt")->check(CLI::IsMember({"mlp", "gpt"}));
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
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
  std::string sync_socket = env_socket ? env_socket : "";
  std::string job = env_job ? env_job : "";
  std::uint64_t sync_every = 0;
  app.add_option("--sync-socket", sync_socket,
                 "the daemon's sync socket for this job (default: $GEOLOCO_SOCKET); rank 0 then trains in the "
                 "daemon's shared memory and hands the replica over every --sync-every steps");
  app.add_option("--job", job, "the job's name, said in HELLO (default: $GEOLOCO_JOB)");
  app.add_option("--sync-every", sync_every, "inner steps between syncs with the daemon (H)");
  app.add_flag("--bench", bench, "measure throughput of mlp and gpt against a plain sgemm");
  app.add_option("--bench-seconds", bench_seconds, "timed training per model in --bench")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

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
  auto launch = launch_info_from_env();
  if (!launch.ok()) return fail(launch.status());
  if (workers > 1 && launch->launcher == "none") return spawn_workers(workers, argv);

  o.schedule.total_steps = decay_steps > 0 ? decay_steps : o.steps;
  if (o.schedule.warmup_steps > o.schedule.total_steps) o.schedule.warmup_steps = o.schedule.total_steps;
  if (Status s = o.validate(); !s.ok()) return fail(s);
  cpu::set_blas_threads(threads);
  ShmCollectiveOptions copts;
  copts.timeout_ms = timeout_ms;
  auto collective = make_cpu_collective(*launch, copts);
  if (!collective.ok()) return fail(collective.status());
  const bool talk = (*collective)->rank() == 0;
  auto data = load_dataset(o);
  if (!data.ok()) return fail(data.status());
  // With a daemon, rank 0 trains in the segment the daemon shares; it
  // starts from the daemon's anchor, or hands over its own initialization
  // when the daemon has none yet. Every rank then starts from the same bits.
  std::unique_ptr<DaemonSync> daemon;
  std::span<float> storage;
  float anchor_ready = 0.0f;
  if (!sync_socket.empty()) {
    if (sync_every == 0) return fail(GEOLOCO_ERROR(Err::invalid_argument, "--sync-every must be set with --sync-socket"));
    if (job.empty()) return fail(GEOLOCO_ERROR(Err::invalid_argument, "--job (or GEOLOCO_JOB) must name the job"));
    if (talk) {
      auto model = make_model(o);
      if (!model.ok()) return fail(model.status());
      auto connected = DaemonSync::connect(sync_socket, job, (*model)->layout(), timeout_ms);
      if (!connected.ok()) return fail(connected.status());
      daemon = std::move(*connected);
      storage = daemon->parameters();
      anchor_ready = daemon->anchor_ready() ? 1.0f : 0.0f;
    }
    if (Status s = (*collective)->broadcast(std::span<float>(&anchor_ready, 1), 0); !s.ok()) return fail(s);
  }
  auto trainer = Trainer::create(o, **collective, *data, storage, /*initialize=*/anchor_ready == 0.0f);
  if (!trainer.ok()) return fail(trainer.status());
  if (!sync_socket.empty()) {
    if (daemon && anchor_ready == 0.0f) {
      if (Status s = daemon->hand_over_initial(); !s.ok()) return fail(s);
    }
    if (Status s = (*collective)->broadcast((*trainer)->params(), 0); !s.ok()) return fail(s);
  }
  if (talk)
    std::cout << "geoloco-train: " << o.model << ", " << (*trainer)->layout().total() << " parameters, "
              << (*data)->describe() << ", " << (*collective)->size() << " worker(s) [" << (*collective)->backend()
              << ", launcher " << launch->launcher << "], batch " << o.batch << " x " << o.micro_batches
              << " micro-batch(es) per worker" << std::endl;

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
  if (!sync_socket.empty()) {
    hooks.sync_every = sync_every;
    hooks.on_sync = [&](SyncPoint& point) { return daemon->sync(point); };  // called on rank 0 only
  }
  auto report = run_training(**trainer, hooks);
  if (!report.ok()) return fail(report.status());
  if (talk) {
    const auto params = (*trainer)->params();
    if (daemon) std::printf("synced with the daemon %llu times\n", static_cast<unsigned long long>(daemon->syncs()));
    std::printf("done: %llu steps, %.1f s, %.0f %s/s, params digest %s\n",
                static_cast<unsigned long long>(report->steps), report->seconds,
                static_cast<double>(report->work_units) / report->seconds,
                (*trainer)->model().work_unit_name().c_str(), digest_hex(digest_f32(params)).c_str());
    if (!save_params.empty()) {
      std::ofstream f(save_params, std::ios::binary);
      f.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size_bytes()));
      if (!f) return fail(GEOLOCO_ERROR(Err::io, "cannot write ", save_params));
    }
  }
  return 0;
}
