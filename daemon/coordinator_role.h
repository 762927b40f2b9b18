// The coordinator role of one job on the site the job names (docs/design.md §3-§4):
// the CoordinatorMachine state machine (coordinator.h) wired to the clock, the
// journal and the sites. Every decision is journaled (fsync) before it is
// sent, so a coordinator restarted after kill -9 resumes at the journaled
// round: it re-announces the last COMMITTED (a site that missed it applies
// it; the others ignore it) and aborts the round that was in flight, so no
// round is applied twice or lost.
//
// Journal records: {"type":"plan",...}, {"type":"committed","round","anchor_digest","tokens","final"},
// {"type":"abort","round","reason"}.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/status.h"
#include "daemon/control_messages.h"
#include "daemon/coordinator_machine.h"
#include "job/job_spec.h"
#include "daemon/journal.h"

namespace geoloco::daemon {

class CoordinatorRole {
 public:
  /// Sends a message to a site of the job (this one included); ordered per site.
  using Send = std::function<void(const std::string& site, const ControlMessage& message)>;
  /// Logs a decision (one line).
  using Note = std::function<void(const std::string& line)>;

  /// Opens (or resumes from) the journal at `journal_path`. Errors: io.
  static Result<std::unique_ptr<CoordinatorRole>> open(const asio::any_io_executor& executor, const job::JobSpec& job,
                                                       Millis heartbeat_timeout, const std::string& journal_path,
                                                       Send send, Note note);

  /// A message from a site of the job (JOIN, HEARTBEAT, READY, COMMIT, or a
  /// participant's failure report as ABORT). Refusals are logged.
  void on_message(const std::string& site, const ControlMessage& message);
  /// Runs the rounds until the job finishes or stop() is called.
  asio::awaitable<void> run();
  void stop();

  /// The last committed round per the journal (0: none) and its anchor digest.
  std::uint64_t committed_round() const { return committed_round_; }
  const std::string& committed_digest() const { return committed_digest_; }
  /// True when the journal already held records: this is a resumed coordinator.
  bool resumed() const { return resumed_; }
  bool finished() const { return coordinator_.phase() == CoordinatorMachine::Phase::finished || finished_in_journal_; }
  /// Sites heard from within the heartbeat timeout.
  std::vector<std::string> live_sites() const;
  /// Sites the last plan left out.
  const std::vector<std::string>& lagging() const { return lagging_; }

 private:
  CoordinatorRole(const asio::any_io_executor& executor, const job::JobSpec& job, Millis heartbeat_timeout, Journal journal,
                  Send send, Note note);
  void greet(const std::string& site);
  Status journal(const nlohmann::json& record);

  job::JobSpec job_;
  Millis heartbeat_timeout_;
  Journal journal_;
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
  bool resumed_ = false;
  CoordinatorMachine coordinator_;
  std::set<std::string> greeted_;
  std::map<std::string, Clock::time_point> heard_;
  std::vector<std::string> lagging_;
  asio::steady_timer wake_;
  bool stopped_ = false;
  bool poked_ = false;  // a message arrived since the last step
  std::set<std::string> standing_;  // standing conditions logged already
};

}  // namespace geoloco::daemon
