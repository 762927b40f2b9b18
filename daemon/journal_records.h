// The journal's records as types, each with its one JSON form
// (docs/wire.md §4), instead of JSON built by hand where each is written:
// every writer fills the struct, and every reader takes the fields back
// through the same codec. The codecs are also the journal's schema: a
// record of a known type that its codec refuses is refused when the
// journal is opened or appended to (check_journal_record, journal.h).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/control_messages.h"

namespace geoloco::daemon {

/// A round this site knows committed, and how it learned it.
struct CommittedRecord {
  std::uint64_t round = 0;
  std::string anchor_digest;
  std::uint64_t tokens = 0;              ///< tokens of every round through this one
  std::optional<bool> final;             ///< absent in records of a state installed from a peer
  std::optional<std::uint64_t> attempt;  ///< absent when the site could not know it
  std::optional<std::uint64_t> epoch;    ///< absent in records of a state installed from a peer
  /// "" (its coordinator decided it, or this site applied it), "announced"
  /// (a COMMITTED heard), "recovery" or "completed" (a successor's, from its
  /// voters), "state_sync" (installed from a peer, with the round-log
  /// entries that came with it).
  std::string via;
  bool operator==(const CommittedRecord&) const = default;
};

/// The plan a COMMIT answered, kept with it so that a restart that rebuilds
/// the round from the round log can list and record it as applied.
struct PendingPlan {
  std::vector<std::string> participants, late;
  std::vector<double> weights;
  std::vector<std::uint64_t> tokens_each, anchor_rounds;
  double loss = 0;
  std::uint64_t epoch = 0;
  std::string coordinator;
  bool operator==(const PendingPlan&) const = default;
};

/// A COMMIT sent whose outcome this site has not learned (or, `cleared`,
/// that the last one's is known now).
struct PendingRecord {
  bool cleared = false;  ///< the record {"type": "pending", "none": true}
  PendingCommit commit;  ///< unless cleared
  std::optional<PendingPlan> plan;
};

/// The coordinator's plan of a round's attempt, journaled before the PLAN
/// is sent.
struct PlanRecord {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::vector<std::string> participants;
  std::vector<double> weights;
  std::vector<std::string> late;
  std::uint64_t epoch = 0;
  bool operator==(const PlanRecord&) const = default;
};

/// The coordinator's abort of a round's attempt, journaled before the ABORT
/// is sent.
struct AbortRecord {
  std::uint64_t round = 0;
  std::string reason;
  std::uint64_t epoch = 0;
  bool operator==(const AbortRecord&) const = default;
};

/// An office: the epoch and the site that holds it ("" while an election of
/// that epoch is open). The content of the `office` record (an office taken
/// or learned) and of the `vote` record (the epoch voted in, and for whom:
/// JSON field `for`).
struct Office {
  std::uint64_t epoch = 0;
  std::string coordinator;
  bool operator==(const Office&) const = default;
};

/// A successor's coordinator role journaled its start (after its recovery):
/// an office record without it is not acted on after a restart.
struct OfficeStartedRecord {
  std::uint64_t epoch = 0;
  bool operator==(const OfficeStartedRecord&) const = default;
};

/// Whether a journal field holds a count: a JSON integer that is not
/// negative (a record built in memory from an int is signed, one read back
/// from disk unsigned).
bool is_count(const nlohmann::json& value);

nlohmann::json to_json(const CommittedRecord& record);
nlohmann::json to_json(const PendingRecord& record);
nlohmann::json to_json(const PlanRecord& record);
nlohmann::json to_json(const AbortRecord& record);
nlohmann::json office_record(const Office& office);
nlohmann::json vote_record(const Office& vote);
nlohmann::json to_json(const OfficeStartedRecord& record);

/// The record back from its JSON. Errors: malformed (another type, or a
/// field of the wrong type, named with the type it must have; absent fields
/// read as 0, "" or none, as records of older versions lack some).
Result<CommittedRecord> committed_record_of(const nlohmann::json& json);
Result<PendingRecord> pending_record_of(const nlohmann::json& json);
Result<PlanRecord> plan_record_of(const nlohmann::json& json);
Result<AbortRecord> abort_record_of(const nlohmann::json& json);
Result<Office> office_record_of(const nlohmann::json& json);
Result<Office> vote_record_of(const nlohmann::json& json);
Result<OfficeStartedRecord> office_started_record_of(const nlohmann::json& json);

/// Whether `type` is a record type this version reads; then `check` is
/// set to what its codec says of `json` (ok, or why not).
bool known_record_type(const std::string& type, const nlohmann::json& json, Status& check);

}  // namespace geoloco::daemon
