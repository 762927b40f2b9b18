#include "daemon/coordinator_role.h"

#include "common/overload.h"
#include "daemon/journal_records.h"

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

namespace geoloco::daemon {

namespace {

CoordinatorOptions options_of(const job::JobSpec& job, Millis heartbeat_timeout, const JournalSummary& s,
                              const CoordinatorRole::Start& start) {
  CoordinatorOptions o;
  o.sites = job.sites;
  o.self = start.self;
  o.named = job.coordinator;
  o.epoch = start.epoch;
  o.live_at_start = start.live;
  o.quorum = job.quorum;
  o.quorum.heartbeat_timeout_ms = heartbeat_timeout;
  o.weighting = job.outer.weighting;
  o.straggler = job.outer.straggler;
  o.stop_after_round = job.last_round().value_or(0);
  o.stop_after_tokens = job.stop_tokens.value_or(0);
  o.tokens_so_far = s.tokens;
  o.first_attempt = s.next_attempt;
  return o;
}

}  // namespace

Result<std::unique_ptr<CoordinatorRole>> CoordinatorRole::open(const asio::any_io_executor& executor,
                                                               const job::JobSpec& job, Millis heartbeat_timeout,
                                                               Journal& journal, Start start, Send send, Note note) {
  if (start.recovery) {
    // A successor: what its voters knew becomes its own journal's truth.
    const Recovery& r = *start.recovery;
    if (r.round > journal.committed_round()) {
      GEOLOCO_TRY(journal.append(
          to_json(CommittedRecord{r.round, r.digest, r.tokens, r.final, r.attempt, start.epoch, "recovery"})));
    }
    if (r.complete) {
      const std::uint64_t round = r.round + 1, tokens = r.tokens + r.complete->tokens;
      const bool final = (job.last_round() && round >= *job.last_round()) ||
                         (job.stop_tokens && *job.stop_tokens > 0 && tokens >= *job.stop_tokens);
      GEOLOCO_TRY(journal.append(to_json(CommittedRecord{round, r.complete->anchor_digest, tokens, final,
                                                         r.complete->attempt, start.epoch, "completed"})));
      note(cat("round ", round, " (attempt ", r.complete->attempt,
               ") is completed as its participants computed it, anchor ", r.complete->anchor_digest,
               ": the previous coordinator may have committed it"));
    }
  }
  if (start.recovery) GEOLOCO_TRY(journal.append(office_started_record(start.epoch)));
  return std::unique_ptr<CoordinatorRole>(new CoordinatorRole(executor, job, heartbeat_timeout, journal,
                                                              std::move(start), std::move(send), std::move(note)));
}

CoordinatorRole::CoordinatorRole(const asio::any_io_executor& executor, const job::JobSpec& job,
                                 Millis heartbeat_timeout, Journal& journal, Start start, Send send, Note note)
    : job_(job),
      heartbeat_timeout_(heartbeat_timeout),
      journal_(journal),
      epoch_(start.epoch),
      send_(std::move(send)),
      note_(std::move(note)),
      coordinator_(options_of(job, heartbeat_timeout, summarize_journal(journal_.records()), start),
                   summarize_journal(journal_.records()).round + 1, Clock::now()),
      wake_(executor),
      decisions_(heartbeat_timeout),
      step_down_(std::move(start.step_down)),
      journal_refused_(std::move(start.journal_refused)) {
  const JournalSummary s = summarize_journal(journal_.records());
  commits_ = s.commits;
  committed_round_ = s.round;
  committed_digest_ = s.digest;
  committed_tokens_ = s.tokens;
  committed_final_ = s.final;
  finished_in_journal_ = s.final;
  if (start.recovery) {
    resumed_ = true;
    if (start.recovery->abandon && !start.recovery->complete)
      in_flight_ = AbortMessage{
          s.round + 1, *start.recovery->abandon,
          cat("coordinator failover: ", start.self, " took office in epoch ", epoch_, "; send READY again"), epoch_};
    note_(cat("coordinator of epoch ", epoch_, " resumes after round ", s.round,
              s.round > 0 ? cat(" (anchor ", s.digest, ")") : std::string(), ", ", s.tokens, " tokens"));
  } else if (s.round > 0 || s.next_attempt > 0 || !s.commits.empty()) {
    resumed_ = true;
    const std::uint64_t attempt = coordinator_.attempt();
    in_flight_ = AbortMessage{s.round + 1, attempt > first_attempt_of(epoch_) ? attempt - 1 : attempt,
                              "the coordinator restarted; send READY again", epoch_};
    note_(cat("coordinator resumes from its journal: last committed round ", s.round,
              s.round > 0 ? cat(" (anchor ", s.digest, ")") : std::string(), ", ", s.tokens, " tokens"));
  }
}

void CoordinatorRole::decide(nlohmann::json record, std::string what, std::function<void()> send) {
  decisions_.add(std::move(record), std::move(what), std::move(send));
}

bool CoordinatorRole::write_decisions(Clock::time_point now) {
  auto flushed = decisions_.flush(now, [this](const nlohmann::json& r) { return journal_.append(r); });
  for (const auto& line : flushed.notes) note_(line);
  if (journal_refused_ && (!flushed.all_written || flushed.written_again)) journal_refused_(!flushed.all_written);
  if (flushed.hand_on_why && step_down_) step_down_(*flushed.hand_on_why);
  return flushed.all_written;
}

std::optional<CommittedMessage> CoordinatorRole::committed_message(std::uint64_t round) const {
  auto it = commits_.find(round);
  if (it == commits_.end()) return std::nullopt;
  return CommittedMessage{round,  it->second.digest, round == committed_round_ && committed_final_, it->second.attempt,
                          epoch_, it->second.tokens};
}

void CoordinatorRole::greet(const std::string& site) {
  if (!resumed_ || !greeted_.insert(site).second) return;
  // A site may have missed what the previous coordinator decided last.
  if (committed_round_ > 0) send_(site, *committed_message(committed_round_));
  if (!finished() && in_flight_) send_(site, *in_flight_);
}

void CoordinatorRole::on_message(const std::string& site, const ControlMessage& message) {
  if (std::find(job_.sites.begin(), job_.sites.end(), site) == job_.sites.end()) {
    spdlog::warn("[{}] coordinator: message from {}, which is not a site of the job", job_.name, site);
    return;
  }
  const auto now = Clock::now();
  heard_[site] = now;
  greet(site);
  Status s = std::visit(
      Overload{[&](const JoinMessage& m) {
                 note_(cat(site, " joined (last committed round ", m.last_committed_round, ")"));
                 // A participant that (re)joins mid-exchange lost that exchange: it will never COMMIT.
                 const auto& parts = coordinator_.participants();
                 if (coordinator_.phase() == CoordinatorMachine::Phase::planned &&
                     std::find(parts.begin(), parts.end(), site) != parts.end())
                   (void)coordinator_.on_failed(site, FailedMessage{coordinator_.round(), coordinator_.attempt(),
                                                                    "it restarted during the exchange"});
                 return coordinator_.on_heartbeat(site, now);
               },
               [&](const HeartbeatMessage& m) { return coordinator_.on_heartbeat(site, now, m.phase); },
               [&](const ReadyMessage& m) {
                 Status r = coordinator_.on_ready(site, m, now);
                 // A READY resent while the round is being exchanged is expected: not worth a warning.
                 if (r.code() == Err::mismatch) {
                   spdlog::debug("[{}] coordinator: {}", job_.name, r.message());
                   return Status{};
                 }
                 return r;
               },
               [&](const CommitMessage& m) {
                 if (auto c = committed_message(m.round)) {
                   // It missed the COMMITTED (of this round, or of an earlier one
                   // it lost track of): say it again, with the attempt that
                   // committed, so it knows whether its work is in it.
                   send_(site, *c);
                   return Status{};
                 }
                 Status r = coordinator_.on_commit(site, m);
                 if (r.code() == Err::mismatch) {
                   spdlog::debug("[{}] coordinator: {}", job_.name, r.message());
                   return Status{};
                 }
                 return r;
               },
               [&](const FailedMessage& m) {
                 Status r = coordinator_.on_failed(site, m);
                 if (r.code() == Err::mismatch) {
                   spdlog::debug("[{}] coordinator: {}", job_.name, r.message());  // of an attempt already over
                   return Status{};
                 }
                 return r;
               },
               [&](const auto& m) {
                 return Status(Err::invalid_argument,
                               cat(control_type_name(ControlMessage(m)), " is not for the coordinator"));
               }},
      message);
  if (!s.ok()) spdlog::warn("[{}] coordinator refused a message from {}: {}", job_.name, site, s.message());
  poked_ = true;
  wake_.cancel();
}

void CoordinatorRole::on_lost(const std::string& site, const std::string& why) {
  if (std::find(job_.sites.begin(), job_.sites.end(), site) == job_.sites.end()) return;
  const auto now = Clock::now();
  if (auto it = heard_.find(site); it != heard_.end()) it->second = std::min(it->second, now - heartbeat_timeout_);
  if (!coordinator_.on_lost(site, now).ok()) return;
  note_(cat(site, " counts as silent from now: its connections closed (", why, ")"));
  poked_ = true;
  wake_.cancel();
}

std::vector<std::string> CoordinatorRole::live_sites() const {
  std::vector<std::string> out;
  const auto now = Clock::now();
  for (const auto& [site, at] : heard_)
    if (now - at < heartbeat_timeout_) out.push_back(site);
  return out;
}

void CoordinatorRole::stop() {
  stopped_ = true;
  wake_.cancel();
}

asio::awaitable<void> CoordinatorRole::run() {
  using asio::experimental::as_tuple;
  // An exchange that outlasts the participants' own all-reduce limit (4 x
  // the heartbeat timeout) plus a margin cannot finish any more: abort it.
  const auto exchange_limit = 5 * heartbeat_timeout_;
  while (!stopped_ && (!finished() || !decisions_.empty())) {
    poked_ = false;
    // The loop passes at least every second. A longer gap than the
    // heartbeat timeout is a process that stood still: the other sites
    // may have elected a successor meanwhile, so this one decides nothing
    // more in its epoch (fenced means fenced) and leaves the office.
    const auto now = Clock::now();
    if (last_step_ && now - *last_step_ > heartbeat_timeout_ && step_down_) {
      const auto gap = std::chrono::duration_cast<Millis>(now - *last_step_).count();
      note_(cat("this coordinator stood still for ", gap / 1000.0,
                " s, longer than the heartbeat timeout: it decides nothing more and leaves the office"));
      decisions_.clear();  // decisions made before the gap are not sent after it
      step_down_(cat("the process stood still for ", gap / 1000.0, " s"));
      break;
    }
    last_step_ = now;
    // A decision goes out only once the journal holds it; one the journal
    // refuses (a full disk) waits, and the machine decides nothing new.
    if (!write_decisions(now)) {
      if (stopped_) break;  // the office was handed on
      wake_.expires_after(std::chrono::seconds(1));
      co_await wake_.async_wait(as_tuple(asio::use_awaitable));
      continue;
    }
    if (coordinator_.phase() == CoordinatorMachine::Phase::planned && planned_at_ &&
        Clock::now() - *planned_at_ > exchange_limit && !coordinator_.participants().empty())
      (void)coordinator_.on_failed(
          coordinator_.participants().front(),
          FailedMessage{coordinator_.round(), coordinator_.attempt(),
                        cat("no COMMIT from every participant within ", exchange_limit.count() / 1000, " s")});
    const bool collecting = coordinator_.phase() == CoordinatorMachine::Phase::collecting;
    auto actions = coordinator_.step(Clock::now());
    // Standing conditions (a silent site, a paused job) are decided again at
    // every step: log them when they start, not every second.
    std::set<std::string> still;
    for (const auto& n : actions.notes) {
      const bool standing = n.rfind("paused:", 0) == 0 || n.find("is silent (no heartbeat)") != std::string::npos;
      if (standing) still.insert(n);
      if (!standing || !standing_.count(n)) note_(n);
    }
    if (collecting) standing_ = std::move(still);  // what holds now (a planned step decides no liveness)
    if (actions.plan) {
      auto record = plan_record(actions.plan->round, actions.plan->attempt, actions.plan->participants,
                                actions.plan->weights, actions.plan->late, epoch_);
      decide(std::move(record), cat("the plan of round ", actions.plan->round), [this, plan = *actions.plan] {
        lagging_ = plan.late;
        planned_at_ = Clock::now();
        for (const auto& site : job_.sites) send_(site, plan);
      });
    }
    if (actions.committed) {
      const auto& c = *actions.committed;
      auto record =
          committed_record(c.round, c.anchor_digest, coordinator_.tokens(), c.final, c.attempt.value_or(0), epoch_);
      decide(std::move(record), cat("the commit of round ", c.round), [this, c, tokens = coordinator_.tokens()] {
        commits_[c.round] = {c.anchor_digest, c.attempt, tokens, epoch_};
        committed_round_ = c.round;
        committed_digest_ = c.anchor_digest;
        committed_tokens_ = tokens;
        committed_final_ = c.final;
        for (const auto& site : job_.sites) send_(site, c);
      });
    }
    if (actions.abort) {
      decide(abort_record(actions.abort->round, actions.abort->reason, epoch_),
             cat("the abort of round ", actions.abort->round), [this, abort = *actions.abort] {
               for (const auto& site : job_.sites) send_(site, abort);
             });
    }
    if (actions.plan || actions.committed || actions.abort || poked_) continue;  // step again at once
    // Sleep until a message arrives or the decision can change by time alone.
    const auto until = actions.wake_at ? std::min(*actions.wake_at, Clock::now() + std::chrono::seconds(1))
                                       : Clock::now() + std::chrono::seconds(1);
    wake_.expires_at(until);
    co_await wake_.async_wait(as_tuple(asio::use_awaitable));
  }
}

}  // namespace geoloco::daemon
