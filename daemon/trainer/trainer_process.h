// The built-in trainer of one job on this site, as a child process of the
// daemon (docs/design.md §2): starts geoloco-train with the job's socket and name in
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
#include "job/trainer_args.h"
#include "common/async_util.h"

namespace geoloco::daemon {

/// How geoloco-train is started (trainer_args.h) and supervised.
struct TrainerProcessOptions : job::TrainerArgs {
  int max_restarts = 5;           ///< restarts in a row before giving up (a run of healthy_after_ms resets the count)
  int restart_backoff_ms = 500;   ///< first delay before a restart, doubled each time
  int max_backoff_ms = 30'000;    ///< upper bound of the delay
  int healthy_after_ms = 60'000;  ///< a run at least this long counts as healthy
  int stop_grace_ms = 5'000;      ///< SIGTERM -> SIGKILL delay in stop()
  int poll_interval_ms = 100;     ///< how often the child is reaped (see trainer_process.cpp)

  /// Called once when the trainer is given up (restarts exhausted, or it
  /// could not be started again); e.g. the engine passes TrainerHost::fail.
  std::function<void(const Status&)> on_give_up;

  /// TrainerArgs' rules (job/trainer_args.h), and the supervision's: no log path, negative times.
  /// Errors: invalid_argument naming the rule.
  Status validate() const;
};

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
  Signal changed_;
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
