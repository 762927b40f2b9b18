// The coordinator role of one job on the site that holds the office
// (docs/design.md §3-§4; succession.h): the CoordinatorMachine state machine
// (coordinator_machine.h) wired to the clock, the site's journal and the
// sites. Every decision is journaled (fsync) before it is sent
// (decision_outbox.h), so a coordinator restarted after kill -9 resumes at
// the journaled round: it re-announces the last COMMITTED (a site that missed it applies it; the
// others ignore it) and aborts the round that was in flight, so no round is
// applied twice or lost. A successor starts from its voters' recovery: it
// journals the last committed round they knew, completes the pending round
// when recover() says so, or aborts the attempt in flight, and then plans
// under its own epoch.
//
// Journal records: {"type":"plan",...,"epoch"}, {"type":"committed","round","anchor_digest","tokens","final",
// "attempt","epoch"}, {"type":"abort","round","reason","epoch"}.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/status.h"
#include "daemon/control_messages.h"
#include "daemon/coordinator_machine.h"
#include "daemon/decision_outbox.h"
#include "job/job_spec.h"
#include "daemon/journal.h"
#include "daemon/succession.h"

namespace geoloco::daemon {

class CoordinatorRole {
 public:
  /// Sends a message to a site of the job (this one included); ordered per site.
  using Send = std::function<void(const std::string& site, const ControlMessage& message)>;
  /// Logs a decision (one line).
  using Note = std::function<void(const std::string& line)>;

  /// Where the role starts: the site it runs on, the office's epoch, and
  /// for a successor the recovery its voters' standings gave.
  struct Start {
    std::string self;
    std::uint64_t epoch = 0;
    std::optional<Recovery> recovery;
    std::set<std::string> live = {};  ///< a successor: the sites live when it took office (the others count as silent)
    /// Called when this site should leave the office to another: its
    /// journal refused a decision for a heartbeat timeout (a site that
    /// cannot write cannot lead), or the process stood still longer than a
    /// heartbeat timeout (SIGSTOP, a paused machine), so the others may have
    /// elected a successor meanwhile and it must decide nothing more.
    std::function<void(const std::string& why)> step_down = {};
    /// Called at each refused write of a decision's journal record (true),
    /// and once when the journal writes again (false): metrics and status.
    std::function<void(bool refused)> journal_refused = {};
  };
  /// Resumes from the site's journal (which outlives the role); a
  /// successor first journals its recovery. Errors: io.
  static Result<std::unique_ptr<CoordinatorRole>> open(const asio::any_io_executor& executor, const job::JobSpec& job,
                                                       Millis heartbeat_timeout, Journal& journal, Start start,
                                                       Send send, Note note);

  /// A message from a site of the job (JOIN, HEARTBEAT, READY, COMMIT, or a
  /// participant's failure report as ABORT). Refusals are logged.
  void on_message(const std::string& site, const ControlMessage& message);
  /// Every connection to `site` closed: it counts as silent now, and the
  /// exchange it takes part in is aborted and planned again without it
  /// (CoordinatorMachine::on_lost).
  void on_lost(const std::string& site, const std::string& why);
  /// Runs the rounds until the job finishes or stop() is called.
  asio::awaitable<void> run();
  void stop();

  /// The last committed round per the journal (0: none) and its anchor digest.
  std::uint64_t committed_round() const { return committed_round_; }
  const std::string& committed_digest() const { return committed_digest_; }
  std::uint64_t epoch() const { return epoch_; }
  /// True when the journal already held records: this is a resumed coordinator.
  bool resumed() const { return resumed_; }
  bool finished() const { return coordinator_.phase() == CoordinatorMachine::Phase::finished || finished_in_journal_; }
  /// Sites heard from within the heartbeat timeout.
  std::vector<std::string> live_sites() const;
  /// Sites the last plan left out.
  const std::vector<std::string>& lagging() const { return lagging_; }

 private:
  CoordinatorRole(const asio::any_io_executor& executor, const job::JobSpec& job, Millis heartbeat_timeout,
                  Journal& journal, Start start, Send send, Note note);
  void greet(const std::string& site);
  /// `send` (what sends the decision) runs once `record` is on disk, after
  /// every decision queued before it.
  void decide(nlohmann::json record, std::string what, std::function<void()> send);
  /// Writes the queued decisions in order and sends each; false: one could
  /// not be written (it and those after it wait; the machine decides nothing new).
  bool write_decisions(Clock::time_point now);

  job::JobSpec job_;
  Millis heartbeat_timeout_;
  Journal& journal_;
  std::uint64_t epoch_;
  std::optional<AbortMessage> in_flight_;  ///< what greet() aborts: the attempt in flight before this role began
  Send send_;
  Note note_;
  /// The COMMITTED of `round` as it went out (final or not, with its attempt), if it was committed.
  std::optional<CommittedMessage> committed_message(std::uint64_t round) const;

  std::map<std::uint64_t, JournaledCommit> commits_;  // every committed round: digest, attempt
  std::uint64_t committed_round_ = 0;
  std::string committed_digest_;
  std::uint64_t committed_tokens_ = 0;
  bool committed_final_ = false;
  bool finished_in_journal_ = false;
  bool resumed_ = false;  // greet every site: the journal held records, or a successor took office
  CoordinatorMachine coordinator_;
  std::set<std::string> greeted_;
  std::map<std::string, Clock::time_point> heard_;
  std::vector<std::string> lagging_;
  asio::steady_timer wake_;
  bool stopped_ = false;
  bool poked_ = false;              // a message arrived since the last step
  std::set<std::string> standing_;  // standing conditions logged already
  DecisionOutbox decisions_;        // decisions whose journal record is not on disk yet, in order
  std::function<void(const std::string&)> step_down_;
  std::function<void(bool)> journal_refused_;
  std::optional<Clock::time_point> last_step_;   // the loop's last pass: a long gap is a process that stood still
  std::optional<Clock::time_point> planned_at_;  // the plan in flight went out then
};

}  // namespace geoloco::daemon
