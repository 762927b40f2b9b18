// The built-in trainer as a supervised child process (trainer_process.h).
//
// Why a waitpid(pid, WNOHANG) poll every poll_interval_ms and not an asio
// signal_set(SIGCHLD): the poll reaps exactly our child and nobody else's
// (geolocod may run other children, and tests run several supervisors in one
// process), needs no process-wide signal disposition, and cannot miss an exit
// when two children die at once (SIGCHLD coalesces). Its cost is one system
// call per 100 ms per job and at most 100 ms of latency before a restart,
// which the restart backoff dwarfs anyway.
#include "daemon/trainer/trainer_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

extern char** environ;

namespace geoloco::daemon {

using asio::use_awaitable;
using asio::experimental::as_tuple;
using Clock = std::chrono::steady_clock;

namespace {

// The program as execve() wants it: a path. Resolved before fork(), since
// the child may only make async-signal-safe calls.
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return program;  // execve fails and the child exits 127, which the log shows
}

// The daemon's environment without its own GEOLOCO_* settings (a
// GEOLOCO_RANK there would confuse the trainer's launcher detection), but
// with the trainer's own GEOLOCO_TRAIN_* ones (e.g. the fault injection of
// the straggler test), plus the job's socket and name.
std::vector<std::string> trainer_environment(const TrainerProcessOptions& o) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "GEOLOCO_", 8) == 0 && std::strncmp(*e, "GEOLOCO_TRAIN_", 14) != 0) continue;
    env.emplace_back(*e);
  }
  if (!o.visible_gpus.empty()) {
    std::string list;
    for (int g : o.visible_gpus) {
      if (!list.empty()) list.push_back(',');
      list.append(std::to_string(g));
    }
    std::erase_if(env, [](const std::string& e) { return e.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0; });
    env.push_back("CUDA_VISIBLE_DEVICES=" + list);
  }
  env.push_back("GEOLOCO_SOCKET=" + o.socket_path);
  env.push_back("GEOLOCO_JOB=" + o.job);
  // The site's place among the job's sites, for a trainer that shards its data itself.
  env.push_back("GEOLOCO_SITE_SHARD=" + std::to_string(o.site_shard));
  env.push_back("GEOLOCO_SITE_SHARDS=" + std::to_string(o.site_shards));
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string_view state_name(TrainerProcess::State state) {
  switch (state) {
    case TrainerProcess::State::running:
      return "running";
    case TrainerProcess::State::restarting:
      return "restarting";
    case TrainerProcess::State::finished:
      return "finished";
    case TrainerProcess::State::failed:
      return "failed";
    case TrainerProcess::State::stopped:
      return "stopped";
  }
  return "unknown";
}

Status TrainerProcessOptions::validate() const {
  GEOLOCO_TRY(job::TrainerArgs::validate());
  GEOLOCO_RETURN_IF(log_path.empty(), Err::invalid_argument, "trainer: log_path must be set");
  GEOLOCO_RETURN_IF(max_restarts < 0 || stop_grace_ms < 0 || healthy_after_ms < 0, Err::invalid_argument,
                    "trainer: max_restarts, stop_grace_ms and healthy_after_ms must be >= 0");
  GEOLOCO_RETURN_IF(
      restart_backoff_ms <= 0 || max_backoff_ms < restart_backoff_ms || poll_interval_ms <= 0, Err::invalid_argument,
      "trainer: restart_backoff_ms and poll_interval_ms must be > 0, max_backoff_ms >= restart_backoff_ms");
  return {};
}

TrainerProcess::TrainerProcess(const asio::any_io_executor& executor, TrainerProcessOptions options)
    : executor_(executor), options_(std::move(options)), timer_(executor), changed_(executor) {}

Result<std::unique_ptr<TrainerProcess>> TrainerProcess::start(const asio::any_io_executor& executor,
                                                              TrainerProcessOptions options) {
  GEOLOCO_TRY(options.validate());
  std::unique_ptr<TrainerProcess> p(new TrainerProcess(executor, std::move(options)));
  GEOLOCO_TRY(p->spawn());
  asio::co_spawn(executor, p->supervise(p->alive_), asio::detached);
  return p;
}

TrainerProcess::~TrainerProcess() {
  *alive_ = false;
  timer_.cancel();
  if (pid_ > 0) {
    // No time to be graceful in a destructor: stop() is the graceful path.
    kill_group(SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

Status TrainerProcess::spawn() {
  std::vector<std::string> args = job::trainer_arguments(options_);
  std::vector<std::string> env = trainer_environment(options_);
  const std::string program = resolve_program(options_.program);
  std::vector<char*> argv = pointers(args);
  std::vector<char*> envp = pointers(env);
  std::string command;
  for (const auto& s : args) command += (command.empty() ? "" : " ") + s;

  const int log = ::open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  GEOLOCO_RETURN_IF(log < 0, Err::io, "trainer of job '", options_.job, "': cannot open log ", options_.log_path, ": ",
                    std::strerror(errno));
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    const int e = errno;
    ::close(log);
    if (null >= 0) ::close(null);
    return GEOLOCO_ERROR(Err::io, "trainer of job '", options_.job, "': fork failed: ", std::strerror(e));
  }
  if (child == 0) {
    // Only async-signal-safe calls from here to execve.
    ::setpgid(0, 0);  // its own group: stop() signals the trainer and its worker processes together
    // A daemon killed with -9 takes its trainer along. The signal follows the
    // forking *thread*: start trainers from the daemon's event-loop thread.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    ::close_range(3, ~0u, 0);  // none of the daemon's sockets leak into the trainer
    // A daemon may ignore SIGPIPE or block signals; an exec'd program inherits both.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(program.c_str(), argv.data(), envp.data());
    static const char kMsg[] = "geolocod: cannot execute the trainer program\n";
    (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    ::_exit(127);
  }
  ::setpgid(child, child);  // also here, so a signal sent right away finds the group
  const std::string banner = cat("--- geolocod: started pid ", child, ": ", command, "\n");
  (void)!::write(log, banner.data(), banner.size());
  ::close(log);
  if (null >= 0) ::close(null);
  pid_ = child;
  started_at_ = Clock::now();
  state_ = State::running;
  spdlog::info("[{}] trainer: started pid {} ({}), log {}", options_.job, child, command, options_.log_path);
  return {};
}

void TrainerProcess::kill_group(int signal) const {
  // The group, so that --workers N worker processes go with rank 0.
  if (pid_ > 0) ::kill(-pid_, signal);
}

void TrainerProcess::give_up(Status why) {
  state_ = State::failed;
  spdlog::error("[{}] trainer: {}", options_.job, why.message());
  if (options_.on_give_up) options_.on_give_up(why);
  changed_.notify_all();
}

void TrainerProcess::on_exit(int code) {
  const pid_t old = pid_;
  const auto ran = Clock::now() - started_at_;
  last_exit_ = code;
  // Worker processes of a trainer that died would block on their collective: end them.
  kill_group(SIGKILL);
  pid_ = -1;
  if (stopping_) {
    state_ = State::stopped;
    spdlog::info("[{}] trainer: pid {} stopped (exit {})", options_.job, old, code);
    changed_.notify_all();
    return;
  }
  if (code == 0) {
    state_ = State::finished;
    spdlog::info("[{}] trainer: pid {} finished", options_.job, old);
    changed_.notify_all();
    return;
  }
  if (ran >= std::chrono::milliseconds(options_.healthy_after_ms)) failures_in_a_row_ = 0;
  ++failures_in_a_row_;
  if (failures_in_a_row_ > options_.max_restarts) {
    give_up(Status(Err::io, cat("the trainer of job '", options_.job, "' exited with ", code, " ", failures_in_a_row_,
                                " times in a row; not restarted (see ", options_.log_path, ")")));
    return;
  }
  // Exponential backoff: a trainer that fails at once must not spin.
  long long delay = options_.restart_backoff_ms;
  for (int i = 1; i < failures_in_a_row_ && delay < options_.max_backoff_ms; ++i) delay *= 2;
  delay = std::min<long long>(delay, options_.max_backoff_ms);
  restart_at_ = Clock::now() + std::chrono::milliseconds(delay);
  state_ = State::restarting;
  spdlog::warn("[{}] trainer: pid {} exited with {} after {} ms; restart {} of {} in {} ms (log {})", options_.job, old,
               code, std::chrono::duration_cast<std::chrono::milliseconds>(ran).count(), failures_in_a_row_,
               options_.max_restarts, delay, options_.log_path);
  changed_.notify_all();
}

asio::awaitable<void> TrainerProcess::supervise(std::shared_ptr<bool> alive) {
  for (;;) {
    timer_.expires_after(std::chrono::milliseconds(options_.poll_interval_ms));
    // Cancellation only comes from the destructor, which clears *alive.
    co_await timer_.async_wait(as_tuple(use_awaitable));
    if (!*alive) co_return;  // destroyed: touch nothing
    if (pid_ > 0) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        on_exit(exit_code(status));
      } else if (r < 0 && errno == ECHILD) {
        on_exit(-1);  // reaped by someone else: its status is lost, treat it as a failure
      }
    }
    if (state_ == State::restarting && !stopping_ && Clock::now() >= restart_at_) {
      ++restarts_;
      if (Status s = spawn(); !s.ok()) give_up(s);
      changed_.notify_all();
    }
    if (state_ == State::finished || state_ == State::failed || state_ == State::stopped) co_return;
  }
}

asio::awaitable<void> TrainerProcess::stop() {
  if (state_ == State::finished || state_ == State::failed || state_ == State::stopped) co_return;
  stopping_ = true;
  if (pid_ < 0) {
    // Between a death and its restart: cancel the restart.
    state_ = State::stopped;
    changed_.notify_all();
    co_return;
  }
  spdlog::info("[{}] trainer: stopping pid {}", options_.job, pid_);
  kill_group(SIGTERM);
  asio::steady_timer tick(executor_);
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.stop_grace_ms);
  bool killed = false;
  // supervise() reaps the child and marks it stopped; here we only escalate.
  while (state_ != State::stopped && state_ != State::finished && state_ != State::failed) {
    if (!killed && Clock::now() >= deadline) {
      spdlog::warn("[{}] trainer: pid {} ignored SIGTERM for {} ms; SIGKILL", options_.job, pid_,
                   options_.stop_grace_ms);
      kill_group(SIGKILL);
      killed = true;
    }
    tick.expires_after(std::chrono::milliseconds(options_.poll_interval_ms));
    co_await tick.async_wait(as_tuple(use_awaitable));
  }
}

asio::awaitable<TrainerProcess::State> TrainerProcess::wait_done() {
  while (state_ == State::running || state_ == State::restarting) co_await changed_.wait();
  co_return state_;
}

}  // namespace geoloco::daemon
