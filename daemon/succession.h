// Who coordinates a job, and how a successor takes office when the acting
// coordinator falls silent (docs/design.md §4, "Coordinator failover"): a
// state machine without I/O, beside coordinator_machine.h and
// participant_machine.h. JobRun feeds it the heartbeats every site sends
// every site, ELECT and VOTE, the epoch of every PLAN, COMMITTED and ABORT,
// and the time, and carries out what step() returns, in order: journal this
// (on disk before anything after it is sent), send this, take office, follow.
//
// Epochs. Epoch 0 is the office of the job's named coordinator
// (`coordinator:`); a later epoch is the office of the site a majority of the
// job's sites voted for. A site votes at most once per epoch, journals the
// vote before it answers, and never goes back to an older epoch: it refuses
// the PLAN, COMMITTED and ABORT of an older one. A round commits only with the
// COMMITs of a majority (coordinator_machine.h), and attempts are numbered
// per epoch, so a coordinator cut off from a majority commits nothing more.
//
// Succession. When the office holder has been silent for the heartbeat
// timeout, the sites heard from rank the possible successors: the most
// advanced committed round first, then the order of `sites:`. The first
// stands at once, the k-th after k more timeouts without a new office. It
// asks for pre-votes first (nothing is journaled or promised, so a site that
// only lost its own link to the coordinator disturbs nobody), then, with a
// majority of those, for votes in the next epoch. A site grants either only
// when the office holder is silent to it too and the candidate has
// committed at least the rounds it has. With a majority of votes the
// candidate takes office; the voters' standings say where the job is
// (recover()).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "daemon/control_messages.h"
#include "daemon/journal_records.h"
#include "diloco/quorum.h"

namespace geoloco::daemon {

using diloco::Clock;
using diloco::Millis;

/// Where a new coordinator resumes, from the standings of a majority.
struct Recovery {
  /// The last committed round any voter knows (0: none), its anchor digest,
  /// the tokens through it, and whether it was the job's last.
  std::uint64_t round = 0;
  std::string digest;
  std::uint64_t tokens = 0;
  bool final = false;
  std::optional<std::uint64_t> attempt;  ///< the attempt that committed it, when the voter knew
  /// The next round's COMMIT that a voter sent for the newest attempt any
  /// voter saw planned: the old coordinator may have committed it, so it is
  /// completed as computed, not planned anew.
  std::optional<PendingCommit> complete;
  /// Otherwise the newest attempt of the next round any voter saw planned:
  /// void, to be aborted before the round is planned again.
  std::optional<std::uint64_t> abandon;
};
/// Decides a Recovery from a majority's standings (the candidate's own
/// among them). Completing the pending attempt is always consistent: every
/// site that finished its exchange computed the same anchor, so whether or
/// not the old coordinator committed it, the job keeps one digest per round.
/// The participants' digest is the attempt's (an observer's that differs
/// was never counted); a plan of a later round seen by any voter proves the
/// next round committed, so then its newest pending COMMIT is completed
/// whatever newer attempt was seen.
Recovery recover(const std::vector<Standing>& standings);

struct SuccessionOptions {
  std::vector<std::string> sites;  ///< the job's sites, in the job's order
  std::string named;               ///< the job's named coordinator (epoch 0's, and the majority's tie-break)
  std::string self;
  Millis heartbeat_timeout{60000};
  Millis resend{2000};  ///< ELECT again to those that did not answer (the heartbeat interval)
};

/// What the journal says about the office: the last office record and the last vote.
struct OfficeRecords {
  std::optional<Office> office;
  std::optional<Office> vote;            ///< epoch voted in, for whom
  std::optional<std::uint64_t> started;  ///< the last epoch whose coordinator role journaled its start (office_started)
};
// The journal records of an office taken or learned, and of a vote:
// office_record() and vote_record() in journal_records.h.
/// Journaled by a successor's role once its recovery is: an office record
/// without it (a crash in between) is not acted on after a restart.
nlohmann::json office_started_record(std::uint64_t epoch);
OfficeRecords office_records(const std::vector<nlohmann::json>& records);

namespace succession {
/// Append to the site's journal, and be on disk, before what follows is sent.
struct Persist {
  nlohmann::json record;
};
struct Send {
  std::string to;
  ControlMessage message;
};
/// This site holds the office now: run the coordinator role from `recovery`.
struct TakeOffice {
  Office office;
  Recovery recovery;
  std::set<std::string> live;  ///< the sites heard from within the heartbeat timeout (this one included)
};
/// The office changed, or this site no longer holds it: stop its coordinator
/// role if it runs, and send what is for the coordinator to `office.coordinator`
/// (nowhere while it is "").
struct Follow {
  Office office;
};
}  // namespace succession

using SuccessionAction =
    std::variant<succession::Persist, succession::Send, succession::TakeOffice, succession::Follow>;

class SuccessionMachine {
 public:
  /// Starts from what the journal says: the office (epoch 0 and the named
  /// coordinator for a new job) and the last vote. A site that holds the
  /// office by its journal holds it again: if it was deposed meanwhile, the
  /// first heartbeat of a newer epoch says so, and no majority answers an
  /// old epoch's plans anyway.
  SuccessionMachine(SuccessionOptions options, const OfficeRecords& journal, Clock::time_point now);

  /// A heartbeat from `from` (its epoch, the office holder it knows, its committed round).
  void on_heartbeat(const std::string& from, const HeartbeatMessage& heartbeat, Clock::time_point now);
  /// Every connection to `site` closed (its process stopped, its link
  /// dropped): it counts as silent from `now`. When it holds the office,
  /// the office is silent here at once, so the succession begins without a
  /// heartbeat timeout's wait; the pre-votes still need a majority that lost
  /// it too, so one site's dropped link deposes nobody. Its next heartbeat
  /// counts it in again.
  void on_lost(const std::string& site, Clock::time_point now);
  /// A PLAN, COMMITTED or ABORT of `epoch` from `from`: take it, or refuse it
  /// (the reason). One of a newer epoch makes `from` the office holder of
  /// that epoch (only the winner sends them).
  Status admit(const std::string& from, std::uint64_t epoch, Clock::time_point now);
  /// `mine`: this site's standing now, reported when the vote is granted.
  /// A pre-vote for a newer epoch is refused while the office's holder was
  /// heard within the heartbeat timeout, but not by a site that has heard
  /// nothing of the office since it started: one that started a moment ago
  /// and has not reached the coordinator yet has no sign that it lives, and
  /// does not hold back a successor while its own connections come up.
  void on_elect(const std::string& from, const ElectMessage& elect, const Standing& mine, Clock::time_point now);
  void on_vote(const std::string& from, const VoteMessage& vote, Clock::time_point now);

  struct Actions {
    std::vector<SuccessionAction> actions;     ///< carry out in order
    std::vector<std::string> notes;            ///< for the log: why an election began, who won
    std::optional<Clock::time_point> wake_at;  ///< call step() again then at the latest
  };
  /// `mine`: this site's standing now (its committed round ranks it; a
  /// candidate's own standing joins the voters').
  Actions step(const Standing& mine, Clock::time_point now);
  /// The last Persist could not be written: a vote, or an office this site
  /// was to take, goes back to what was before it (the caller sent nothing
  /// after it). An office learned from a peer, or a vacancy, stays: it is
  /// followed in memory (nothing sent depends on its record).
  void on_persist_failed(Clock::time_point now);
  /// This site holds the office but cannot act on it (its role did not
  /// start): it leaves the office vacant, so another site stands.
  void resign(const std::string& why, Clock::time_point now);

  const Office& office() const { return office_; }
  std::uint64_t epoch() const { return office_.epoch; }
  /// This site holds the office.
  bool acting() const { return office_.coordinator == options_.self; }
  /// Offices taken by a successor since this machine started (this site's or others', as seen here).
  std::uint64_t failovers() const { return failovers_; }
  /// The sites heard from within the heartbeat timeout (this one included).
  std::set<std::string> live(Clock::time_point now) const;

 private:
  struct Candidacy {
    std::uint64_t epoch = 0;
    bool pre = true;
    Clock::time_point began{};
    Clock::time_point sent{};
    std::set<std::string> granted;  // this site included
    std::map<std::string, Standing> standings;
  };

  void act(SuccessionAction a) { actions_.push_back(std::move(a)); }
  /// Steps down to `epoch`, newer than this site's, whose holder is not known yet.
  void adopt_epoch(std::uint64_t epoch, const std::string& from, Clock::time_point now);
  void note(std::string line) { notes_.push_back(std::move(line)); }
  bool majority(const std::set<std::string>& members) const {
    return diloco::is_majority(options_.sites, options_.named, members);
  }
  /// How long the office has been silent here (zero while its holder is heard, or is this site).
  Millis silence(Clock::time_point now) const;
  /// This site's place among the possible successors (0: first), or none when it is not one.
  std::optional<std::size_t> rank(const Standing& mine, Clock::time_point now) const;
  /// The office's clock restarts at `now` (a sign of life, or a new office or election).
  void office_heard(Clock::time_point now);
  /// Follows `office`, a newer one (or the winner of this epoch), learned from `from`.
  void learn(const Office& office, const std::string& from, Clock::time_point now);
  void refuse(const std::string& to, const ElectMessage& elect, std::string why);
  void send_elect(Clock::time_point now);

  SuccessionOptions options_;
  Office office_;
  std::optional<Office> vote_;      // the last vote: its epoch and the candidate
  Clock::time_point office_heard_;  // the holder's last sign of life (or when the office fell vacant)
  /// True from the start until the office's clock is set by an event (the
  /// holder heard, an office learned, a vote): the start is no sign of life.
  bool office_unheard_since_start_ = true;
  std::map<std::string, Clock::time_point> heard_;
  std::set<std::string> lost_;                      // sites whose connections closed, until heard from again
  std::map<std::string, std::uint64_t> committed_;  // each peer's committed round, by its heartbeats
  std::uint64_t highest_epoch_ = 0;                 // the highest epoch seen anywhere
  /// The epoch whose office this site left (resign()): a peer's heartbeat
  /// that still names this site for it is not taken as an office to hold again.
  std::optional<std::uint64_t> resigned_epoch_;
  std::optional<Candidacy> candidacy_;
  Clock::time_point not_before_{};  // no new candidacy before then (after one lapsed)
  struct Undo {
    Office office;
    std::optional<Office> vote;
    Clock::time_point office_heard;
  };
  std::optional<Undo> undo_;   // before the last Persist
  bool epochs_spent_ = false;  // said once: no epoch is left to stand for
  std::uint64_t failovers_ = 0;
  std::vector<SuccessionAction> actions_;
  std::vector<std::string> notes_;
};

}  // namespace geoloco::daemon
