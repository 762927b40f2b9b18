// What a job on this site shows and keeps of its state: the state's names,
// each committed round's record as `geoloco status` and `watch` print it,
// and the job folder's status.json, which tells a restarted geolocod which
// job to resume and which names are used up.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/round_costs.h"
#include "inner/protocol/eval_log.h"

namespace geoloco::daemon {

enum class JobState { starting, running, finished, failed, cancelled, stopped };
std::string_view job_state_name(JobState state);
/// Errors: invalid_argument.
Result<JobState> parse_job_state(std::string_view name);

/// What one committed round looked like from this site (geoloco watch).
struct RoundRecord {
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;   ///< the fragment synced (Streaming DiLoCo; 0: the whole model)
  std::uint32_t fragments = 1;  ///< the job's F; status shows `fragment` only when > 1
  std::vector<std::string> participants;
  std::vector<std::string> late;
  double loss = 0;               ///< participants' weighted mean training loss (from the PLAN)
  std::uint64_t tokens = 0;      ///< tokens of the round's contributions
  std::uint64_t bytes_sent = 0;  ///< this site, frames of the all-reduce
  std::uint64_t bytes_received = 0;
  double compression_ratio = 0;  ///< raw fp32 bytes of the same all-reduce / bytes sent (0: sent nothing)
  double compute_seconds = 0;    ///< this site's inner phase
  double waiting_seconds = 0;    ///< READY to PLAN
  double exchange_seconds = 0;   ///< PLAN to COMMITTED
  /// The trainer's own clock over its phase (from its SYNC; absent when it
  /// does not measure it): seconds in inner steps, and its loop's seconds
  /// without evaluations. Their ratio is the site's compute share.
  std::optional<double> trainer_compute_seconds, trainer_loop_seconds;
  /// trainer_compute_seconds / trainer_loop_seconds, when both are known and the loop took time.
  std::optional<double> compute_share() const;
  std::string digest;
  bool contributed = false;  ///< this site's Δ was in the round
  /// Not applied here: the state this round gave came from this site (a
  /// state transfer), which listed the round so (no bytes or timings of this site).
  std::string installed_from;
  /// What the round cost this process (round_costs.h): a round it applied
  /// itself since it started; not kept on disk.
  std::optional<RoundCosts> costs;
};

/// A round's record as status and watch show it, with the eval loss of the
/// anchor the round started from (`eval`: by round, null when not known).
nlohmann::json record_json(const RoundRecord& record, const std::map<std::uint64_t, double>& eval);

/// What `geoloco status` shows of a job on this site, gathered by JobRun.
struct JobStatusView {
  std::string name;
  JobState state = JobState::starting;
  std::string message;
  std::string coordinator;  ///< the office holder ("" while an election is open)
  std::uint64_t epoch = 0;  ///< the office's epoch (0: the job's named coordinator)
  std::vector<std::string> sites;
  std::uint64_t round = 0;  ///< rounds committed
  std::optional<std::uint64_t> stop_rounds;
  std::uint32_t fragments = 1;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  const std::vector<RoundRecord>* records = nullptr;
  inner::EvalHistory eval;
  std::optional<std::string> checkpoint;     ///< its path, when one was saved
  std::optional<std::string> anchor_digest;  ///< when an anchor is held
  /// The coordinator's view of who is live and who lags; without it (another
  /// site) the last committed round's participants and late sites.
  std::optional<std::pair<std::vector<std::string>, std::vector<std::string>>> liveness;
  std::string job_dir;
  std::string where;  ///< the participant machine's state
};
/// The status object: the view's fields, every round's record, the tokens
/// of all rounds, the latest training loss, the latest eval loss (with its
/// round, and its accuracy for a classifier).
nlohmann::json status_json(const JobStatusView& view);

/// <job dir>/status.json: {"state": ..., "file": ..., "message": ...}.
struct StatusFile {
  JobState state = JobState::starting;
  std::string file;  ///< the job file it was submitted from
  std::string message;
};
/// Replaces the file whole (written aside, then renamed over it). Errors: io.
Status write_status_file(const std::string& job_dir, const StatusFile& status);
/// Errors: io (no such file, unreadable), malformed (not such an object, an
/// unknown state).
Result<StatusFile> read_status_file(const std::string& job_dir);

}  // namespace geoloco::daemon
