// Reading geoloco-train's eval log (its writer: inner/train/eval_log.h), the
// JSON lines with which a trainer tells its daemon the held-out loss of each
// anchor it was handed:
//
//   {"round": 3, "eval_loss": 0.61234, "accuracy": 0.7815, "items": 2000, "unix_time": 1764500000.123}
//
// The daemon's status and `geoloco simulate` both read it with this.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace geoloco::inner {

/// What an eval log holds, by `round` (the round its anchor starts): the
/// finite eval losses and, for a classifier, the accuracies. A line whose
/// loss was not finite is skipped whole; of two lines for a round (a
/// restarted trainer's), the later wins.
struct EvalHistory {
  std::map<std::uint64_t, double> loss;
  std::map<std::uint64_t, double> accuracy;
};

/// Reads the log at `path`; a missing file is an empty history, and a line
/// that is not such an object (a torn last line) is skipped.
EvalHistory read_eval_log(const std::string& path);

}  // namespace geoloco::inner
