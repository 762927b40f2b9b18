// The rounds a site committed in a job, as `geoloco status` and `watch` list
// them (loss, tokens, bytes, timings, digest), kept in the job folder's
// rounds.jsonl so that a geolocod started again still shows the whole job,
// not only the rounds since it started.
//
// Format: one record per line, `<xxh3-64 hex> <json>\n` (common/line_log.h):
// each append is on disk before it returns, and opening drops a torn or
// damaged tail. A round committed again (a site that restarted before its
// checkpoint caught up with its records) replaces the records from that
// round on, so the list stays in round order with one record per round.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/line_log.h"
#include "common/status.h"
#include "daemon/job_status.h"

namespace geoloco::daemon {

/// The file's name in the job folder.
inline constexpr const char* kRoundLogFile = "rounds.jsonl";

/// A record as the file keeps it (every field of RoundRecord).
nlohmann::json stored_record_json(const RoundRecord& record);
/// The record of a stored line's JSON, or nothing when a field is missing or of the wrong type.
std::optional<RoundRecord> stored_record(const nlohmann::json& json);

class RoundLog {
 public:
  /// Opens (creating if missing) and reads the log at `path`. Errors: io.
  static Result<RoundLog> open(const std::string& path);

  /// The records, in round order.
  const std::vector<RoundRecord>& records() const { return records_; }
  /// Bytes dropped from the tail when the log was opened (a crash mid-append).
  std::size_t dropped_bytes() const { return log_.dropped_bytes(); }
  /// This site's all-reduce bytes over the records.
  std::uint64_t bytes_sent() const;
  std::uint64_t bytes_received() const;

  /// Adds a committed round's record (replacing those of its round and
  /// later) and writes it. The record is listed even when the write fails.
  /// Errors: io (the file lacks it; a restart would not show it).
  Status append(const RoundRecord& record);

 private:
  explicit RoundLog(LineLog log) : log_(std::move(log)) {}
  void keep(RoundRecord record);
  LineLog log_;
  std::vector<RoundRecord> records_;
};

}  // namespace geoloco::daemon
