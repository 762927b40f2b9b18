#include "inner/train/eval_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

namespace geoloco::inner {

namespace {

// %.9g: enough digits that the loss reads back as the same float; JSON
// numbers, never "nan" or "inf".
std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

}  // namespace

std::string eval_log_line(const EvalLogEntry& e) {
  const std::string accuracy =
      e.has_accuracy && e.eval.predictions > 0
          ? json_number(static_cast<double>(e.eval.correct) / static_cast<double>(e.eval.predictions))
          : "null";
  char time[32];
  std::snprintf(time, sizeof time, "%.3f", e.unix_time);
  return cat("{\"round\": ", e.round, ", \"eval_loss\": ", json_number(e.eval.loss), ", \"accuracy\": ", accuracy,
             ", \"items\": ", e.items, ", \"unix_time\": ", time, "}\n");
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<std::unique_ptr<EvalLog>> EvalLog::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  GEOLOCO_RETURN_IF(fd < 0, Err::io, "cannot open the eval log ", path, ": ", std::strerror(errno));
  return std::unique_ptr<EvalLog>(new EvalLog(fd, path));
}

EvalLog::~EvalLog() { ::close(fd_); }

Status EvalLog::append(const EvalLogEntry& entry) {
  const std::string line = eval_log_line(entry);
  // One write per line at the end of the file (O_APPEND), retried only when interrupted.
  ssize_t n;
  do {
    n = ::write(fd_, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  GEOLOCO_RETURN_IF(n < 0, Err::io, "cannot append to the eval log ", path_, ": ", std::strerror(errno));
  GEOLOCO_RETURN_IF(static_cast<std::size_t>(n) != line.size(), Err::io, "short write to the eval log ", path_, " (", n,
                    " of ", line.size(), " bytes)");
  return {};
}

}  // namespace geoloco::inner
