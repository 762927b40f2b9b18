// CPU clocks for a program's own accounting: what a round cost a site by
// stage (geolocod), next to the wall clock. The thread clock counts only the
// calling thread, so a stage timed around a synchronous call is that call's
// CPU, whatever the other threads do; the process clock counts every thread.
#pragma once

#include <time.h>

namespace geoloco {

inline double cpu_clock_seconds(clockid_t clock) {
  timespec t{};
  if (clock_gettime(clock, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

/// CPU seconds the calling thread has used so far.
inline double thread_cpu_seconds() { return cpu_clock_seconds(CLOCK_THREAD_CPUTIME_ID); }
/// CPU seconds (user + system) the process has used so far, all threads.
inline double process_cpu_seconds() { return cpu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

/// Adds the calling thread's CPU seconds from its construction to its
/// destruction to `into`.
class ThreadCpuTimer {
 public:
  explicit ThreadCpuTimer(double& into) : into_(into), start_(thread_cpu_seconds()) {}
  ~ThreadCpuTimer() { into_ += thread_cpu_seconds() - start_; }
  ThreadCpuTimer(const ThreadCpuTimer&) = delete;
  ThreadCpuTimer& operator=(const ThreadCpuTimer&) = delete;

 private:
  double& into_;
  double start_;
};

}  // namespace geoloco
