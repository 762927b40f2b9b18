// geoloco-train's command line as one struct: the options of the run, of
// its sync with a daemon, and of the program. parse_train_command() is the
// only reading of those flags; geoloco-train's main() runs what it returns,
// and `geoloco simulate` parses the very arguments geolocod starts each
// site's trainer with, so a simulated site trains exactly as a real one.
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "inner/train/synced_training.h"
#include "inner/train/train_options.h"

namespace geoloco::inner {

struct TrainCommand {
  TrainOptions train;           ///< complete: the schedule's length and the model's defaults filled in
  SyncedOptions sync;           ///< meaningful when `synced`
  bool synced = false;          ///< a daemon is named (--sync-socket or GEOLOCO_SOCKET)
  std::string backend = "cpu";  ///< --backend
  int threads = 1;              ///< --threads: OpenBLAS threads per worker
  int workers = 1;              ///< --workers: worker processes to start without a launcher
  int timeout_ms = 600'000;     ///< --timeout-ms
  bool bench = false;           ///< --bench
  double bench_seconds = 10.0;  ///< --bench-seconds
  std::string save_params;      ///< --save-params
};

/// What parse_train_command() found: a command to run, or the exit code of
/// one that is done (--help, or a usage error already printed).
struct ParsedTrainCommand {
  std::optional<TrainCommand> command;
  int exit_code = 0;
};

/// Reads a variable of the environment (GEOLOCO_SOCKET, GEOLOCO_JOB); null when unset.
using EnvLookup = std::function<const char*(const char*)>;

/// Parses `args` (args[0] is the program) as geoloco-train does, checks the
/// combinations (the sync flags only with a daemon; --sync-every or
/// --sync-seconds, not both) and the options' rules. Help goes to `out`,
/// errors to `err` as "geoloco-train: …" with exit code 1 (CLI11's own for
/// usage errors).
ParsedTrainCommand parse_train_command(const std::vector<std::string>& args, const EnvLookup& env, std::ostream& out,
                                       std::ostream& err);

}  // namespace geoloco::inner
