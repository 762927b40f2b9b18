// The coordinator's round logic as a state machine without I/O, the twin of
// participant_machine.h (the site's side): the daemon feeds it what sites
// say (READY, COMMIT, FAILED, heartbeats) and the time, and carries out what
// step() returns (journal, then send). coordinator_role.h is that wiring.
//
// A round r, with anchor θ_r:
//   collecting  READYs arrive; diloco::decide_quorum() says when to close
//   planned     PLAN(r) names the participants and their weights (tokens,
//               times decay^rounds_late for carried contributions); they
//               all-reduce, apply the outer step and send COMMIT(r, digest)
//   committed   every participant reported the same digest: COMMITTED(r),
//               and round r + 1 starts collecting
// A participant whose heartbeats stop while planned (or whose connections
// close: on_lost, at once), or digests that differ, abort the round:
// ABORT(r), sites keep θ_r, and round r is collected again.
// A round commits only when a majority of the job's sites (diloco::is_majority)
// sent its COMMIT with the committed digest, this coordinator counting as one:
// the participants, and the observers, which compute the step too. While
// fewer than a majority are live the job pauses. So a coordinator cut off
// from a majority commits nothing, and a successor elected by any majority
// hears of every round that may have committed (succession.h).
// The k-th abort in a row is followed by a pause before the next plan
// (kReplanPause doubling, at most kReplanPauseMax): an attempt that fails at
// once (a link that is down) must not become a loop of plans and aborts.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/control_messages.h"
#include "diloco/quorum.h"
#include "diloco/straggler.h"

namespace geoloco::daemon {

using diloco::Clock;
using diloco::Millis;

struct CoordinatorOptions {
  std::vector<std::string> sites;  ///< the job's sites
  std::string self;                ///< the site this coordinator runs on (counts toward a majority)
  std::string named;               ///< the job's named coordinator: the majority's tie-break
  std::uint64_t epoch = 0;         ///< the office's epoch: every PLAN, COMMITTED and ABORT carries it
  diloco::QuorumOptions quorum;    ///< min_sites, deadline, heartbeat timeout
  diloco::Weighting weighting = diloco::Weighting::tokens;
  diloco::StragglerOptions straggler;   ///< carry (with decay) or drop
  std::uint64_t stop_after_round = 0;   ///< the last round; 0: no limit
  std::uint64_t stop_after_tokens = 0;  ///< the job ends with the round that reaches this many tokens; 0: no limit
  std::uint64_t tokens_so_far = 0;      ///< tokens of the rounds committed before `round` (a resumed job)
  /// Sites known to be live when the machine starts (a successor's view); the
  /// others count as silent from the start, not for one more heartbeat
  /// timeout, and as back from closed connections once heard (on_lost).
  /// Empty: every site counts as heard from at the start.
  std::set<std::string> live_at_start;
  std::uint64_t first_attempt =
      0;  ///< the first plan's attempt (a resumed job: past the journal's last; at least first_attempt_of(epoch))
};

class CoordinatorMachine {
 public:
  enum class Phase { collecting, planned, finished };
  static constexpr Millis kReplanPause{100};
  static constexpr Millis kReplanPauseMax{5000};

  /// Starts at round `round` (1 for a new job; the journal's last committed
  /// round + 1 after a restart). Every site counts as heard from at `now`.
  CoordinatorMachine(CoordinatorOptions options, std::uint64_t round, Clock::time_point now);

  /// `phase`: the heartbeat's (HeartbeatMessage::phase; "" leaves the last
  /// one). A site whose phase is "idle" (its state in place, no trainer
  /// training) when the round's first READY comes, or at any time after it,
  /// is joining: once min_sites are READY the round is not held for it
  /// (diloco::SiteReport).
  /// Not at round 1, where every trainer starts at once. A site whose phase
  /// is "catching_up" is waited for as any other (up to the deadline, which
  /// gives a slow link time to catch up), but not named late in a plan: it
  /// would not observe the round, only be sent its average beside the state
  /// it fetches. Errors: invalid_argument (unknown site).
  Status on_heartbeat(const std::string& site, Clock::time_point now, const std::string& phase = "");
  /// Every connection to `site` closed (its process stopped, its link
  /// dropped): it counts as silent from `now` instead of a heartbeat timeout
  /// later, its READY is forgotten, and a participant of the current plan
  /// that has not sent its COMMIT fails the exchange, so the round is
  /// planned again without it at once. Its next heartbeat or READY counts it
  /// live again, but it is joining (not waited for) in every round after
  /// round 1 that begins before its next READY while its trainer does not
  /// train (its heartbeat not `inner`, `ready` or `exchange`): its trainer's
  /// phase began after the others'.
  /// Errors: invalid_argument (unknown site).
  Status on_lost(const std::string& site, Clock::time_point now);
  /// A READY for another round than the current one is refused with the
  /// reason (the site learns the current round from the next PLAN). Any
  /// READY sets the site's phase to "inner": it ends the "idle" of a
  /// heartbeat sent before it. Errors: invalid_argument, mismatch.
  Status on_ready(const std::string& site, const ReadyMessage& ready, Clock::time_point now);
  /// A participant's COMMIT, or an observer's (it counts toward the
  /// majority when its digest is the participants'). Errors:
  /// invalid_argument (neither), mismatch (another round or attempt).
  Status on_commit(const std::string& site, const CommitMessage& commit);
  /// A participant could not finish the exchange (its all-reduce failed):
  /// the round is aborted at the next step(). Errors: as on_commit.
  Status on_failed(const std::string& site, const FailedMessage& failure);

  struct Actions {
    std::optional<PlanMessage> plan;            ///< journal, then send to every site
    std::optional<CommittedMessage> committed;  ///< journal, then send to every site
    std::optional<AbortMessage> abort;          ///< send to every site
    std::optional<Clock::time_point> wake_at;   ///< call step() again then at the latest
    std::vector<std::string> notes;             ///< decisions for the log (weights, stragglers, deaths)
  };
  /// Advances as far as the inputs allow.
  Actions step(Clock::time_point now);

  Phase phase() const { return phase_; }
  std::uint64_t round() const { return round_; }
  /// The current round's attempt: while planned, the plan's number; while
  /// collecting, the number the next plan will take.
  std::uint64_t attempt() const { return attempt_; }
  /// The participants of the current plan (planned phase).
  const std::vector<std::string>& participants() const { return participants_; }
  /// Tokens of every committed round.
  std::uint64_t tokens() const { return tokens_; }

 private:
  /// What the quorum rule sees at `now`: a site that sits out (below) is live but not READY.
  std::map<std::string, diloco::SiteReport> reports(Clock::time_point now) const;
  void start_collecting(std::uint64_t round);
  /// The site's last heartbeat phase ("" if none).
  std::string phase_of(const std::string& site) const;
  /// Round round_ again after an abort at `now`: collected at once, planned after the pause.
  void collect_again(Clock::time_point now);

  CoordinatorOptions options_;
  Phase phase_ = Phase::collecting;
  std::uint64_t round_;
  std::map<std::string, Clock::time_point> heard_;
  std::map<std::string, std::string> phase_of_;  // each site's last heartbeat phase
  std::set<std::string> joining_;                // idle when the current round's first READY came, or restarted (below)
  /// Sites whose connections closed (on_lost), until their next READY or a
  /// round that begins while their trainer trains: joining in the rounds
  /// that begin before (while their state is in place and no READY is held).
  std::set<std::string> restarted_;
  std::map<std::string, ReadyMessage> ready_;
  std::map<std::string, Clock::time_point> ready_at_;
  std::vector<std::string> participants_;
  std::uint64_t plan_tokens_ = 0;
  std::uint64_t attempt_ = 0;           // the current plan of round_; never reused for a round
  std::optional<std::string> failure_;  // a participant's report
  std::optional<std::string> failed_;   // the first participant that reported its own failure
  /// Sites whose own failure (FailedMessage::own) aborted an attempt, with when they count again: a
  /// heartbeat timeout later. Until then their READY does not count, so the
  /// round closes without them (they observe it, and their work is late),
  /// instead of failing on them again (a full disk would fail every attempt).
  std::map<std::string, Clock::time_point> sits_out_until_;
  std::uint64_t tokens_ = 0;
  std::map<std::string, std::string> commits_;  // participant -> digest
  std::map<std::string, std::string> acks_;     // observer -> digest
  std::vector<std::string> late_;               // the current plan's observers
  std::uint32_t aborts_in_row_ = 0;             // since the last commit
  std::optional<Clock::time_point> replan_at_;  // no plan before then
};

}  // namespace geoloco::daemon
