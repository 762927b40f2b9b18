// The rounds a site committed in a job, as `geoloco status` and `watch` list
// them (loss, tokens, bytes, timings, digest), kept in the job folder's
// rounds.jsonl so that a geolocod started again still shows the whole job,
// not only the rounds since it started.
//
// Format: one record per line, `<xxh3-64 hex> <json>\n` (common/line_log.h):
// each append is on disk before it returns, and opening drops a torn or
// damaged tail. Each line names the job's configuration (the hash of its
// job.yaml): a folder reused by a job of another configuration does not
// list the old job's rounds. A line that is whole but not a record this
// version reads is skipped, not the file cut there. A round recorded again
// (a job that started over in a reused folder) replaces the records from
// that round on, so the list stays in round order with one record per round.
// A record that could not be written (a full disk) waits, in order, and is
// written before the next one.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <span>
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
  /// Opens (creating if missing) and reads the log at `path`: the records of
  /// the configuration `config` (lines of another one are kept, not listed). Errors: io.
  static Result<RoundLog> open(const std::string& path, std::string config);

  /// The records, in round order.
  const std::vector<RoundRecord>& records() const { return records_; }
  /// Bytes dropped from the tail when the log was opened (a crash mid-append).
  std::size_t dropped_bytes() const { return log_.dropped_bytes(); }
  /// Whole lines skipped when the log was opened: not a record this version reads.
  std::size_t skipped_lines() const { return skipped_; }
  /// Records listed but not yet on disk (their writes failed; the next append tries them first).
  std::size_t unwritten() const { return unwritten_.size(); }
  /// This site's all-reduce bytes over the records.
  std::uint64_t bytes_sent() const;
  std::uint64_t bytes_received() const;

  /// Adds a committed round's record (replacing those of its round and
  /// later) and writes it, after any that wait. The record is listed even
  /// when the write fails. Errors: io (it waits for the next append; a
  /// restart before then would not list it).
  Status append(const RoundRecord& record);
  /// Adds records of consecutive rounds, in order, with one write.
  Status append(std::span<const RoundRecord> records);
  /// Sets the listed record of `round`'s costs (what the file keeps is
  /// unchanged: costs are not stored). False when no record of it is listed.
  bool set_costs(std::uint64_t round, const RoundCosts& costs);

 private:
  RoundLog(LineLog log, std::string config) : log_(std::move(log)), config_(std::move(config)) {}
  void keep(RoundRecord record);
  LineLog log_;
  std::string config_;
  std::vector<RoundRecord> records_;
  std::vector<std::string> unwritten_;  ///< lines, oldest first
  std::size_t skipped_ = 0;
};

}  // namespace geoloco::daemon
