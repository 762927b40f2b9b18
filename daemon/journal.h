// A site's journal of its job (docs/design.md §3-§4). The coordinator writes
// every round decision here, and makes it durable, before it is announced,
// so a coordinator restarted after kill -9 resumes at the journaled round
// and never applies a round twice or loses one. Every site also writes what
// it needs to take the coordinator's office (succession.h): each round it
// applies or installs, the COMMIT it sent whose outcome it has not learned,
// its votes and the offices it learned.
//
// Format: one record per line, `<xxh3-64 hex> <json>\n`. A record counts
// only when its line is complete and its hash matches; opening the journal
// drops a torn or corrupted tail (a crash mid-append) and truncates the file
// there, so the next append starts clean.
#pragma once

#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/line_log.h"
#include "common/status.h"
#include "daemon/control_messages.h"

namespace geoloco::daemon {

class Journal {
 public:
  /// Opens (creating if missing) and reads the journal at `path`.
  /// Errors: io. A torn tail is not an error: it is dropped and counted.
  static Result<Journal> open(const std::string& path);

  /// The complete records, oldest first.
  const std::vector<nlohmann::json>& records() const { return records_; }
  /// Bytes dropped from the tail when the journal was opened.
  std::size_t dropped_bytes() const { return log_.dropped_bytes(); }

  /// Appends a record and returns only once it is on disk (fdatasync).
  /// Errors: io (the record may then be absent after a crash, never torn).
  Status append(const nlohmann::json& record);
  /// The highest round of a `committed` record (0: none), and that record.
  std::uint64_t committed_round() const { return committed_round_; }
  const nlohmann::json& last_committed() const { return last_committed_; }
  /// The `committed` record of `round` (the first one journaled), or null.
  const nlohmann::json* committed_record(std::uint64_t round) const {
    auto it = committed_at_.find(round);
    return it == committed_at_.end() ? nullptr : &records_[it->second];
  }

 private:
  explicit Journal(LineLog log) : log_(std::move(log)) {}
  LineLog log_;
  std::vector<nlohmann::json> records_;
  std::uint64_t committed_round_ = 0;
  nlohmann::json last_committed_;
  std::map<std::uint64_t, std::size_t> committed_at_;  // round -> index in records_
  void note_committed(const nlohmann::json& record);
};

/// Whether geolocod can read `record`: a JSON object whose known fields
/// (per record type, docs/wire.md) have their JSON types where present.
/// Journal::open refuses a journal holding one that is not (malformed,
/// naming the record and the field); append() refuses to write one.
Status check_journal_record(const nlohmann::json& record);

/// Where a journal leaves the coordinator: the last committed round (0:
/// none), its anchor digest, the tokens of every committed round, whether
/// it was the job's last, and the attempt number the next round's first
/// plan takes. Plans are journaled before they are sent, so starting past
/// the last journaled attempt means a resumed coordinator never reuses an
/// attempt number: a site that declined (round, attempt) before the restart
/// drops that operation's frames, and would drop a new plan's under it.
/// A committed round as the journal has it: its anchor digest, the plan's
/// attempt that committed (the last attempt planned for it, or the one the
/// COMMITTED named; unknown for a state installed by STATE_SYNC), the
/// tokens through it and the epoch it was committed in.
struct JournaledCommit {
  std::string digest;
  std::optional<std::uint64_t> attempt;
  std::uint64_t tokens = 0;
  std::uint64_t epoch = 0;
};
struct JournalSummary {
  /// Every committed round, so a site that lost track of a round it sent
  /// COMMIT for can be told which attempt committed it.
  std::map<std::uint64_t, JournaledCommit> commits;
  std::uint64_t round = 0;
  std::string digest;
  std::uint64_t tokens = 0;
  bool final = false;
  std::uint64_t next_attempt = 0;
  /// The last `pending` record: a COMMIT sent whose outcome was not learned
  /// (none once a later record says so, or a round at least its is committed).
  std::optional<PendingCommit> pending;
};
JournalSummary summarize_journal(const std::vector<nlohmann::json>& records);

/// The answer to a ROUND_QUERY about `round` from this journal: the attempt
/// that committed it and its digest, when a `committed` record of the round
/// names its attempt (none: the round is not here, or only as a state
/// installed from a donor that did not know the attempt).
std::optional<RoundOutcomeMessage> round_outcome(const Journal& journal, std::uint64_t round);

/// The plan this site answered with its COMMIT of `round` (of `attempt`,
/// when given), as the journal's `pending` record keeps it, and the
/// coordinator that sent it; none when the record lacks the plan or it is
/// not well formed.
std::optional<PlanMessage> journaled_plan(const std::vector<nlohmann::json>& records, std::uint64_t round,
                                          std::optional<std::uint64_t> attempt, std::string& coordinator);

}  // namespace geoloco::daemon
