// When does a round close, and with whom? The coordinator's quorum rule
// (docs/design.md §4) as a pure function of the time and what each site reported,
// in the shape of torchft's quorum_compute: tests pass a fixed `now` and
// read the reason; the daemon only wires clocks and sockets to it.
//
// The rule, worked through in the README: a round closes as soon as every
// live site is READY; or, once `min_sites` sites are READY, when `deadline`
// has passed since the min_sites-th READY (the late ones become
// stragglers). A joining site (SiteReport::joining) is not waited for once
// `min_sites` are READY: it is late at once. While fewer than `min_sites` sites are live, the job pauses.
// A site is live while its last heartbeat is younger than the heartbeat
// timeout.
//
// Beside it, the majority rule: a round commits, and a coordinator is
// elected, only with a majority of the job's sites (is_majority()), so two
// sides of a partition never both go on.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::diloco {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

struct QuorumOptions {
  int min_sites = 1;                   ///< fewest READY sites a round may close with, >= 1
  Millis deadline_ms{60000};           ///< wait after the min_sites-th READY for the rest
  Millis heartbeat_timeout_ms{60000};  ///< no heartbeat for this long: the site is dead

  /// Errors: invalid_argument naming the rule.
  Status validate() const;
};

/// What the coordinator knows about one site in the current round.
struct SiteReport {
  Clock::time_point last_heartbeat{};         ///< when the site was last heard from
  std::optional<Clock::time_point> ready_at;  ///< when it sent READY for this round
  std::uint64_t tokens = 0;                   ///< tokens it processed (from READY)
  /// Live but not training when the round's first READY came (catching up
  /// after a restart, its trainer not attached yet): its READY cannot come
  /// before a whole inner phase later, so the round is not held for it.
  bool joining = false;
};

struct QuorumDecision {
  enum class Kind {
    wait,   ///< not yet: look again at `wake_at` or at the next message
    close,  ///< announce a PLAN with `participants`
    pause,  ///< fewer than min_sites live: the job waits for sites to (re)join
  };
  Kind kind = Kind::wait;
  std::vector<std::string> participants;     ///< close: READY sites, sorted by name (the plan's order)
  std::vector<std::string> late;             ///< close: live sites left out (stragglers)
  std::vector<std::string> dead;             ///< sites whose heartbeats stopped
  std::optional<Clock::time_point> wake_at;  ///< wait: when the decision can next change by time alone
  std::string reason;                        ///< one line for logs and `geoloco watch`
};

/// More than half of `sites`, or exactly half with `named` (the job's named
/// coordinator) among them: any two such sets share a site. Names not in
/// `sites` do not count.
bool is_majority(const std::vector<std::string>& sites, const std::string& named, const std::set<std::string>& members);
/// What is_majority() asks for, in words: "2 of the job's 3 sites".
std::string majority_words(const std::vector<std::string>& sites, const std::string& named);

/// Decides the current round. Pure: the same inputs give the same decision.
QuorumDecision decide_quorum(Clock::time_point now, const std::map<std::string, SiteReport>& sites,
                             const QuorumOptions& options);

}  // namespace geoloco::diloco
