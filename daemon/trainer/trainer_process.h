// The built-in trainer of one job on this site, as a child process of the
// daemon (DESIGN §2): starts geoloco-train with the job's socket and name in
// GEOLOCO_SOCKET / GEOLOCO_JOB and its arguments from TrainerProcessOptions,
// appends its stdout and stderr to a log file in the job's folder, restarts it
// with exponential backoff when it dies (a bounded number of times in a row,
// each logged), and stops it on shutdown (SIGTERM to its process group, then
// SIGKILL after a grace period).
//
// A trainer that exits 0 has finished (the daemon said stop, or it ran its
// --steps): it is not restarted. The restarted trainer reconnects to the
// job's TrainerHost, which welcomes it at the host's current round.
//
// An external trainer (`trainer.kind: external`) needs none of this: the
// TrainerHost simply waits for it to attach.
//
// Not here: the sync protocol (trainer_host.h), the job file.
#pragma once

#include <sys/types.h>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transport/async_util.h"

namespace geoloco::daemon {

/// What geoloco-train is started with. Fields map one to one onto its flags
/// (inner/train/main.cpp); 0 or empty leaves the trainer's default.
struct TrainerProcessOptions {
  std::string program = "geoloco-train";  ///< path of the binary (PATH is searched when it has no '/')
  std::string socket_path;                ///< the job's sync socket -> GEOLOCO_SOCKET
  std::string job;                        ///< the job's name -> GEOLOCO_JOB
  std::string log_path;                   ///< stdout and stderr are appended here, e.g. <job dir>/trainer.log

  std::string model = "mlp";              ///< --model: mlp | gpt
  std::vector<std::size_t> hidden;        ///< --hidden (mlp hidden widths)
  int layers = 0;                         ///< --layers (gpt blocks)
  int width = 0;                          ///< --width (gpt embedding width)
  int heads = 0;                          ///< --heads (gpt)
  int context = 0;                        ///< --context (gpt sequence length in bytes)
  std::uint64_t steps = 0;                ///< --steps: inner steps a run may take (the daemon stops it earlier)
  std::uint64_t batch = 0;                ///< --batch: samples per micro-batch per worker
  double lr = 0;                          ///< --lr: peak inner learning rate
  std::optional<std::uint64_t> warmup;    ///< --warmup: linear warmup steps (unset: the trainer's default)
  std::optional<std::uint64_t> seed;      ///< --seed: initialization and data order; every site of a job uses the job's
  std::uint64_t sync_every = 1;           ///< --sync-every: H, inner steps per round, >= 1 (unless sync_seconds)
  double sync_seconds = 0;                ///< --sync-seconds: time-based rounds instead (inner.duration); 0 = off
  std::uint64_t min_steps = 0;            ///< --min-steps with sync_seconds (0: the trainer's default)
  std::uint64_t overlap_steps = 0;        ///< --overlap: Streaming DiLoCo's τ, inner steps a fragment's exchange overlaps
  double alpha = 0;                       ///< --alpha: Streaming DiLoCo's α in [0, 1], the local replica's merge weight
  std::optional<double> weight_decay;     ///< --weight-decay: AdamW decoupled weight decay
  std::optional<double> clip;             ///< --clip: global gradient-norm bound, 0 = off
  std::string eval_log;                   ///< --eval-log: the trainer evaluates every anchor into this file
  std::string state_dir;                  ///< --state-dir: AdamW state kept across trainer restarts
  std::string backend;                    ///< --backend: cpu | cuda (empty: the trainer's default, cpu)
  /// GPUs the trainer may use (the site file's `gpus`): CUDA_VISIBLE_DEVICES
  /// in its environment; empty leaves the variable as the daemon has it.
  std::vector<int> visible_gpus;
  std::uint32_t site_shard = 0;           ///< --site-shard: this site's data shard, < site_shards
  std::uint32_t site_shards = 1;          ///< --site-shards: sites sharing the data
  std::uint32_t workers = 1;              ///< --workers: data-parallel worker processes
  std::uint64_t eval_limit = 0;           ///< --eval-limit: evaluation items (0: the trainer's default)
  std::vector<std::string> extra_args;    ///< appended verbatim (e.g. --data-dir)

  int max_restarts = 5;                   ///< restarts in a row before giving up (a run of healthy_after_ms resets the count)
  int restart_backoff_ms = 500;           ///< first delay before a restart, doubled each time
  int max_backoff_ms = 30'000;            ///< upper bound of the delay
  int healthy_after_ms = 60'000;          ///< a run at least this long counts as healthy
  int stop_grace_ms = 5'000;              ///< SIGTERM -> SIGKILL delay in stop()
  int poll_interval_ms = 100;             ///< how often the child is reaped (see trainer_process.cpp)

  /// Called once when the trainer is given up (restarts exhausted, or it
  /// could not be started again); e.g. the engine passes TrainerHost::fail.
  std::function<void(const Status&)> on_give_up;

  /// Errors: invalid_argument naming the rule (empty program, socket or job,
  /// sync_every 0, site_shard >= site_shards, workers 0, negative times,
  /// alpha outside [0, 1]).
  Status validate() const;
};

/// geoloco-train's argument vector for `options` (argv[0] is the program).
std::vector<std::string> trainer_arguments(const TrainerProcessOptions& options);

class TrainerProcess {
 public:
  enum class State : std::uint8_t {
    running,     ///< a child runs
    restarting,  ///< the child died; the next starts after the backoff
    finished,    ///< the child exited 0; not restarted
    failed,      ///< restarts exhausted, or the program could not be started
    stopped,     ///< stop() ended it
  };

  /// Starts the trainer. Errors: invalid_argument (validate()), io (the log
  /// file, fork).
  static Result<std::unique_ptr<TrainerProcess>> start(const asio::any_io_executor& executor,
                                                       TrainerProcessOptions options);
  /// Kills a child that still runs (SIGKILL to its group) and reaps it;
  /// co_await stop() first for a graceful end.
  ~TrainerProcess();
  TrainerProcess(const TrainerProcess&) = delete;
  TrainerProcess& operator=(const TrainerProcess&) = delete;

  /// SIGTERM to the trainer's process group, SIGKILL after stop_grace_ms,
  /// then reaps it; no restart follows. Returns once no child runs.
  asio::awaitable<void> stop();
  /// Waits until the trainer will not run again (finished, failed or stopped).
  asio::awaitable<State> wait_done();

  State state() const { return state_; }
  /// The running child's pid, -1 when none.
  pid_t pid() const { return pid_; }
  /// Restarts so far (all of them, not only the current run of failures).
  int restarts() const { return restarts_; }
  /// How the last child ended: exit code, or 128 + signal; -1 before any ended.
  int last_exit() const { return last_exit_; }

 private:
  TrainerProcess(const asio::any_io_executor& executor, TrainerProcessOptions options);
  Status spawn();
  void on_exit(int code);
  void give_up(Status why);
  asio::awaitable<void> supervise(std::shared_ptr<bool> alive);
  void kill_group(int signal) const;

  asio::any_io_executor executor_;
  TrainerProcessOptions options_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  asio::steady_timer timer_;
  transport::Signal changed_;
  pid_t pid_ = -1;
  std::chrono::steady_clock::time_point started_at_;
  std::chrono::steady_clock::time_point restart_at_;
  State state_ = State::running;
  bool stopping_ = false;
  int restarts_ = 0;
  int failures_in_a_row_ = 0;
  int last_exit_ = -1;
};

std::string_view state_name(TrainerProcess::State state);

}  // namespace geoloco::daemon
