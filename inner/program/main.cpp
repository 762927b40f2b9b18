// geoloco-train: the built-in inner trainer (docs/design.md §2). Trains `mlp` on
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

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/digest.h"
#include "inner/collective/launch.h"
#include "inner/cpu/blas.h"
#include "inner/program/backend.h"
#include "inner/train/bench.h"
#include "inner/train/fault_injection.h"
#include "inner/train/run_training.h"
#include "inner/train/synced_training.h"
#include "inner/train/train_command.h"

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

#ifdef GEOLOCO_CUDA_TRAINER
// Runs the CUDA build of this program, from this program's own folder, in
// this process with the same arguments. Returns only if it cannot (exit 2).
int exec_cuda_trainer(char** argv) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path = GEOLOCO_CUDA_TRAINER;
  if (n > 0) {
    const std::string exe(self, static_cast<std::size_t>(n));
    path = exe.substr(0, exe.rfind('/') + 1) + GEOLOCO_CUDA_TRAINER;
  }
  ::execv(path.c_str(), argv);
  const int err = errno;
  return fail_backend("cuda", GEOLOCO_ERROR(Err::unsupported, "the CUDA trainer ", path, " cannot be run (",
                                            std::strerror(err), "); it is built beside geoloco-train when CUDA is"));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  auto parsed = parse_train_command(
      args, [](const char* name) { return std::getenv(name); }, std::cout, std::cerr);
  if (!parsed.command) return parsed.exit_code;
  TrainCommand& c = *parsed.command;
  const TrainOptions& o = c.train;
  const std::string& backend = c.backend;

#ifdef GEOLOCO_CUDA_TRAINER
  // This program carries the CPU backend only (it starts without loading
  // CUDA's libraries); the CUDA one is its sibling program, run in its place
  // with the same arguments before anything starts.
  if (backend == "cuda") return exec_cuda_trainer(argv);
#endif
  // Before anything starts (workers, data): can this binary, here, run it?
  if (Status s = check_backend(backend); !s.ok()) return fail_backend(backend, s);
  if (c.bench && backend != "cpu")
    return fail(GEOLOCO_ERROR(Err::invalid_argument,
                              "--bench measures the CPU backend; geoloco-gpu-bench measures the CUDA one"));
  if (c.bench) {
    BenchOptions b;
    b.seconds_per_model = c.bench_seconds;
    b.threads = c.threads;
    b.mlp.data = o.data;
    b.gpt.data.text_path = o.data.text_path;
    auto r = run_bench(b, std::cout);
    return r.ok() ? 0 : fail(r.status());
  }
  // Fault injection (a test's straggler): refused here, before any worker starts, when it is not a number.
  const char* delay_env = std::getenv(kStepDelayEnv);
  auto step_delay_ms = parse_step_delay_ms(delay_env);
  if (!step_delay_ms.ok()) return fail(step_delay_ms.status());
  const bool synced = c.synced;
  const SyncedOptions& sync = c.sync;
  auto launch = launch_info_from_env();
  if (!launch.ok()) return fail(launch.status());
  if (c.workers > 1 && launch->launcher == "none") return spawn_workers(c.workers, argv);

  cpu::set_blas_threads(c.threads);
  BackendOptions bopts;
  bopts.name = backend;
  bopts.timeout_ms = c.timeout_ms;
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
                static_cast<double>(report->work_units) / report->seconds, trainer.model().work_unit_name().c_str(),
                digest_hex(digest_f32(params)).c_str());
    if (synced_run)
      std::printf(
          "compute share %.1f%%: %.1f s in steps of the loop's %.1f s without its %.1f s of evaluations "
          "(the rest waited for syncs and merges)\n",
          100.0 * report->compute_share, report->compute_seconds, report->loop_seconds, report->eval_seconds);
    if (!c.save_params.empty()) {
      std::ofstream f(c.save_params, std::ios::binary);
      f.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size_bytes()));
      if (!f) return fail(GEOLOCO_ERROR(Err::io, "cannot write ", c.save_params));
    }
  }
  return 0;
}
