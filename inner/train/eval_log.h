// geoloco-train's --eval-log: one JSON line per anchor the daemon hands
// over, with its loss on the held-out split, so the daemon (and a user with
// `tail -f`) can show evaluation loss per round without parsing the
// trainer's stdout:
//
//   {"round": 3, "eval_loss": 0.61234, "accuracy": 0.7815, "items": 2000, "unix_time": 1764500000.123}
//
// `round` is the round the anchor starts (θ_r: the anchor of WELCOME or of
// the answer to INIT, then each RESULT's next round, the final stop RESULT
// included), so the rounds of one trainer increase. `accuracy` is null for
// gpt (a language model has no accuracy here), `eval_loss` null if it is not
// finite (JSON has no NaN). `items` counts images or text windows (the unit
// of --eval-limit). Each line is one write(2) on an O_APPEND descriptor, not
// buffered (no fsync: a line lost in a power cut costs nothing), and a
// restarted trainer appends to the lines of the one before. The daemon and
// the simulator read it back with inner/protocol/eval_log.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "inner/protocol/eval_log.h"
#include "inner/models/model.h"

namespace geoloco::inner {

struct EvalLogEntry {
  std::uint64_t round = 0;  ///< the round that starts from the evaluated anchor
  EvalResult eval;
  bool has_accuracy = false;  ///< a classifier (mlp): accuracy = correct / predictions
  std::size_t items = 0;      ///< evaluation items (images or windows)
  double unix_time = 0.0;     ///< seconds since 1970, when the evaluation finished
};

/// The line for `entry`, '\n' included. A pure function.
std::string eval_log_line(const EvalLogEntry& entry);

/// The seconds since 1970 of the system clock now.
double unix_time_now();

class EvalLog {
 public:
  /// Opens `path` for appending (created 0644 when missing).
  /// Errors: io naming the path.
  static Result<std::unique_ptr<EvalLog>> open(const std::string& path);
  ~EvalLog();
  EvalLog(const EvalLog&) = delete;
  EvalLog& operator=(const EvalLog&) = delete;

  /// Appends the entry's line. Errors: io.
  Status append(const EvalLogEntry& entry);
  const std::string& path() const { return path_; }

 private:
  EvalLog(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace geoloco::inner
