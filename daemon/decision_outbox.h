// The coordinator's decisions (plan, commit, abort), each sent only once its
// journal record is on disk (docs/design.md §4): a pure queue with a fixed
// clock, which the coordinator role (coordinator_role.h) drains on every
// pass of its loop through the site's journal.
//
// Decisions are written in the order they were made; one the journal
// refuses (a full disk) holds it and every later one back, nothing of them
// is sent, and the machine decides nothing new meanwhile. The refusal is
// said once (a "paused:" line, which `geoloco status` shows) and, once it
// has lasted `hand_on_after` (the heartbeat timeout), the office is handed
// on once: a site that cannot write cannot lead. When a write succeeds
// again the held decisions go out in order, and that is said too.
#pragma once

#include <nlohmann/json.hpp>

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "diloco/quorum.h"

namespace geoloco::daemon {

using diloco::Clock;
using diloco::Millis;

class DecisionOutbox {
 public:
  /// Writes one record durably (the journal's append).
  using Write = std::function<Status(const nlohmann::json& record)>;

  explicit DecisionOutbox(Millis hand_on_after) : hand_on_after_(hand_on_after) {}

  /// Queues a decision: `record` is journaled, then `send` runs, after every
  /// decision queued before it. `what` names it in the log ("the plan of round 7").
  void add(nlohmann::json record, std::string what, std::function<void()> send);

  /// What one flush did.
  struct Flushed {
    bool all_written = true;         ///< false: a record was refused (once per flush); it and those after it wait
    bool written_again = false;      ///< a refusal ended: the held decisions went out
    std::vector<std::string> notes;  ///< lines for the log
    std::optional<std::string> hand_on_why;  ///< leave the office, for this reason (said once per refusal)
  };
  /// Writes the queued records in order and runs each one's `send` once its
  /// record is written; stops at the first refusal.
  Flushed flush(Clock::time_point now, const Write& write);

  /// Drops every queued decision unsent (the process stood still: what it
  /// decided before the gap must not go out after it).
  void clear() { queued_.clear(); }
  bool empty() const { return queued_.empty(); }
  std::size_t size() const { return queued_.size(); }
  /// Since when the journal has refused the first queued decision (nothing: it has not).
  const std::optional<Clock::time_point>& refused_since() const { return refused_since_; }

 private:
  struct Decision {
    nlohmann::json record;
    std::string what;
    std::function<void()> send;
  };
  Millis hand_on_after_;
  std::deque<Decision> queued_;
  std::optional<Clock::time_point> refused_since_;
  bool handed_on_ = false;
};

/// The journal records of the coordinator's decisions, as summarize_journal reads them.
nlohmann::json plan_record(std::uint64_t round, std::uint64_t attempt, const std::vector<std::string>& participants,
                           const std::vector<double>& weights, const std::vector<std::string>& late,
                           std::uint64_t epoch);
nlohmann::json committed_record(std::uint64_t round, const std::string& anchor_digest, std::uint64_t tokens, bool final,
                                std::uint64_t attempt, std::uint64_t epoch);
nlohmann::json abort_record(std::uint64_t round, const std::string& reason, std::uint64_t epoch);

}  // namespace geoloco::daemon
