// A site's history file, <job dir>/history.jsonl: written by geolocod, one
// record per line, each on disk before append() returns (the journal's
// discipline: a crash leaves at most a torn last line, which the next open
// cuts off); read back whole by `geoloco check-history`.
#pragma once

#include <string>
#include <vector>

#include "common/line_log.h"
#include "common/status.h"
#include "history/check.h"
#include "history/events.h"

namespace geoloco::history {

inline constexpr const char* kHistoryFile = "history.jsonl";

class HistoryFile {
 public:
  /// Opens (creating if missing) the history at `path` for appending.
  /// Errors: io.
  static Result<HistoryFile> open(const std::string& path);
  /// The records the file held when it was opened.
  const std::vector<Record>& records() const { return records_; }
  /// Appends `event`, stamped with the wall clock. Errors: io.
  Status append(const Event& event);
  /// Appends a record with its own time (one that waited for room). Errors: io.
  Status append(const Record& record);
  const std::string& path() const { return log_.path(); }

 private:
  explicit HistoryFile(LineLog log) : log_(std::move(log)) {}
  LineLog log_;
  std::vector<Record> records_;
};

/// A history as the checker reads it: every complete line must be a valid
/// record; a last line without its newline (the site was killed while
/// writing it) is left out and counted. Errors: io, malformed naming the
/// file and line.
struct ReadHistory {
  std::vector<Record> records;
  bool torn_tail = false;
};
Result<ReadHistory> read_history(const std::string& path);

/// The rounds the coordinator's journal (<job dir>/journal, daemon/journal.h's
/// format: "<xxh3> <json>" lines) says committed, read up to its first torn
/// or damaged line as the coordinator itself would. Errors: io.
Result<std::vector<JournalCommit>> read_journal_commits(const std::string& path);

}  // namespace geoloco::history
