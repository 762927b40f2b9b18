// The journal's `committed` and `pending` records as types, each with its
// one JSON form (docs/wire.md §4), instead of JSON built by hand where each
// is written: every writer fills the struct, and the readers take the
// fields back through the same codec. The other record types have their
// one writer each (decision_outbox.h: plan, abort; succession.h: vote,
// office, office_started).
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

/// Whether a journal field holds a count: a JSON integer that is not
/// negative (a record built in memory from an int is signed, one read back
/// from disk unsigned).
bool is_count(const nlohmann::json& value);

nlohmann::json to_json(const CommittedRecord& record);
nlohmann::json to_json(const PendingRecord& record);

/// The record back from its JSON. Errors: malformed (another type, or a
/// field of the wrong type; absent fields read as 0, "" or none).
Result<CommittedRecord> committed_record_of(const nlohmann::json& json);
Result<PendingRecord> pending_record_of(const nlohmann::json& json);

}  // namespace geoloco::daemon
