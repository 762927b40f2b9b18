// Runs a function as N forked worker processes, the way a launcher starts
// ranks, and collects their exit codes within a time bound (a hung rank is
// killed and reported as -1, so a test can never hang the suite).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace geoloco::inner::testing {

/// Exit codes of ranks 0..n-1 (-1: killed at the deadline or by a signal).
/// In the child, `body(rank)` runs with GEOLOCO_RANK, GEOLOCO_WORLD_SIZE and
/// GEOLOCO_RUN_ID set, and its return value becomes the exit code (_exit:
/// the child must not run the test framework's destructors).
inline std::vector<int> fork_ranks(int n, const std::function<int(int)>& body, double timeout_s = 60.0) {
  static int run = 0;
  const std::string run_id = "test-" + std::to_string(::getpid()) + "-" + std::to_string(run++);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("GEOLOCO_RANK", std::to_string(r).c_str(), 1);
      ::setenv("GEOLOCO_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("GEOLOCO_RUN_ID", run_id.c_str(), 1);
      int code = 99;
      try {
        code = body(r);
      } catch (...) {
        code = 98;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<std::size_t>(n), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::size_t done = 0;
  while (done < pids.size()) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] == 0) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        pids[i] = 0;
        ++done;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : pids)
        if (p != 0) {
          ::kill(p, SIGKILL);
          ::waitpid(p, nullptr, 0);
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return codes;
}

}  // namespace geoloco::inner::testing
