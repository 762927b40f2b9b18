// The history checker (`geoloco check-history`): reads every site's history
// of a job, and the coordinator's journal, and finds the first place where
// the promises break (docs/history.md):
//
//   1. one digest per round: every site that committed a round, took it by
//      STATE_SYNC or ended on it, and the journal, name the same anchor
//      digest, every site committed the same attempt, participants and
//      contributions, and every round the journal committed is held by
//      some site: applied, or (when its coordinator went down between
//      journaling it and any site recording it) rebuilt from a round log or
//      taken from a peer, its work then counted by no history;
//   2. each site's rounds are contiguous: a committed round follows the one
//      the site held, none is applied twice, a gap is covered by a state
//      taken from a peer (whose digest rule 1 checks), and a restart never
//      starts from a round beyond the highest the site held;
//   3. the job reached its stop condition (a round committed as the last),
//      and every site not named as down ended `finished` on that round;
//   4. the token ledger balances: every phase a trainer reported is counted
//      by exactly one committed contribution or one `dropped` event, except
//      work that was in memory when its site was killed or stopped (counted
//      apart); no contribution or drop names work that was never reported.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "history/events.h"

namespace geoloco::history {

struct SiteHistory {
  std::string source;  ///< where it was read from, for messages
  std::vector<Record> records;
  bool torn_tail = false;
};

/// A round the coordinator's journal says committed.
struct JournalCommit {
  std::uint64_t round = 0;
  std::string digest;
  bool final = false;
  std::uint64_t tokens = 0;  ///< the round's tokens, as the coordinator counted them
};

struct CheckInput {
  std::vector<SiteHistory> sites;
  std::vector<JournalCommit> journal;
  std::set<std::string> allowed_down;  ///< sites that need not be running at the end
  /// The job's sites (from its job.yaml), when known: each must have its
  /// history given (a site that is down too: its work is in the ledger).
  std::vector<std::string> job_sites;
};

struct CheckSummary {
  std::size_t sites = 0;
  std::uint64_t rounds = 0;            ///< the job's last committed round
  std::uint64_t digests_compared = 0;  ///< (site or journal, round) digests checked against each other
  std::uint64_t restarts = 0;          ///< `started` events after a site's first
  std::uint64_t aborts = 0;            ///< attempts abandoned, as sites saw them (one per site)
  std::uint64_t state_syncs = 0;
  std::uint64_t torn_tails = 0;         ///< histories whose last line was cut by a kill
  std::uint64_t checkpoints_ahead = 0;  ///< restarts from a round the site never held (then refused)
  std::uint64_t tokens_reported = 0;
  std::uint64_t tokens_committed = 0;
  std::uint64_t tokens_dropped = 0;
  std::uint64_t tokens_in_memory = 0;  ///< reported, then lost with a killed or stopped site's memory
  std::uint64_t drops = 0;
  /// Journal rounds that every site took from its round log or a peer, none
  /// recording them as applied: their work is not checked (see rule 1).
  std::uint64_t rounds_unrecorded = 0;
  std::uint64_t tokens_unrecorded = 0;
  std::int64_t longest_without_commit_ms = 0;  ///< from the first record to the last commit
};

struct CheckResult {
  std::string violation;  ///< the first broken promise; empty when none
  CheckSummary summary;
  bool ok() const { return violation.empty(); }
};

CheckResult check_history(const CheckInput& input);

/// The summary as `geoloco check-history` prints it, one fact per line.
std::string summary_text(const CheckSummary& summary);

}  // namespace geoloco::history
