// The coordinator's office of one job on this site (job_run.h): the
// succession machine (succession.h) wired to the site's journal, the peers,
// the coordinator role and the participant machine, and what every site
// journals so that any of them can take the office: each round it applies
// or installs, and the COMMIT it sent whose outcome it has not learned.
#include <algorithm>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <spdlog/spdlog.h>

#include "common/overload.h"
#include "daemon/job_run.h"

namespace geoloco::daemon {

Standing JobRun::standing() const {
  Standing s;
  if (const auto c = committed_record_of(journal_->last_committed()); c.ok()) {
    s.committed_round = c->round;
    s.anchor_digest = c->anchor_digest;
    s.tokens = c->tokens;
    s.final = c->final.value_or(false);
    s.committed_attempt = c->attempt;
  }
  if (machine_) s.pending = machine_->pending_commit();
  if (!s.pending && restored_pending_ && restored_pending_->round > s.committed_round) s.pending = restored_pending_;
  if (machine_ && machine_->newest_plan()) {
    s.newest_round = machine_->newest_plan()->first;
    s.newest_attempt = machine_->newest_plan()->second;
  }
  return s;
}

bool JobRun::step_succession() {
  auto step = succession_->step(standing(), Clock::now());
  for (const auto& line : step.notes) note(line);
  bool persisted = true;
  for (auto& action : step.actions) {
    if (!persisted) break;  // nothing is sent that the journal does not hold
    persisted = execute(action);
  }
  if (step.wake_at && (!wake_at_ || *step.wake_at < *wake_at_)) {
    wake_at_ = step.wake_at;
    if (wake_) wake_->cancel();
  }
  return !step.actions.empty() || !step.notes.empty();
}

bool JobRun::execute(SuccessionAction& action) {
  using namespace succession;
  return std::visit(
      Overload{[&](Persist& p) {
                 if (Status s = journal_->append(p.record); !s.ok()) {
                   spdlog::error("[{}] cannot journal {}: {}; nothing that depends on it is sent", spec_.name,
                                 p.record.dump(), s.message());
                   journal_refused(cat("paused: cannot journal this site's ", p.record.value("type", "office"),
                                       " record (", s.message(), "); nothing that depends on it is sent"));
                   succession_->on_persist_failed(Clock::now());
                   return false;
                 }
                 journal_written();
                 return true;
               },
               [&](Send& s) {
                 send(s.to, s.message);
                 return true;
               },
               [&](TakeOffice& t) {
                 if (env_.metrics) {
                   (void)env_.metrics->add("geoloco_failovers_total", {{"job", spec_.name}}, 1);
                   (void)env_.metrics->set("geoloco_coordinator_epoch", {{"job", spec_.name}}, double(t.office.epoch));
                 }
                 stop_role("a new office");
                 if (Status s = start_role(t.recovery, true, t.live); !s.ok()) {
                   spdlog::error("[{}] cannot take the coordinator's office of epoch {}: {}", spec_.name,
                                 t.office.epoch, s.message());
                   succession_->resign(s.message(), Clock::now());  // another site stands
                   return true;
                 }
                 machine_->on_office(self());
                 changed_.notify_all();
                 return true;
               },
               [&](Follow& f) {
                 if (env_.metrics) {
                   if (f.office.epoch > 0 && !f.office.coordinator.empty() && f.office.coordinator != self())
                     (void)env_.metrics->add("geoloco_failovers_total", {{"job", spec_.name}}, 1);
                   (void)env_.metrics->set("geoloco_coordinator_epoch", {{"job", spec_.name}}, double(f.office.epoch));
                 }
                 if (f.office.coordinator != self())
                   stop_role(cat("epoch ", f.office.epoch,
                                 f.office.coordinator.empty() ? std::string(" is being elected")
                                                              : cat(" belongs to ", f.office.coordinator)));
                 machine_->on_office(f.office.coordinator);
                 changed_.notify_all();
                 return true;
               }},
      action);
}

Status JobRun::start_role(std::optional<Recovery> recovery, bool run_now, std::set<std::string> live) {
  auto role = CoordinatorRole::open(
      env_.executor, spec_, Millis(env_.site.heartbeat_timeout_ms), *journal_,
      CoordinatorRole::Start{self(), succession_->epoch(), std::move(recovery), std::move(live),
                             [this](const std::string& why) {
                               // It cannot write, or stood still: another site stands.
                               succession_->resign(why, Clock::now());
                               step_succession();
                             },
                             [this](bool refused) {
                               if (refused) journal_refused("");  // the role says why ("paused: ...")
                               else journal_written();
                             }},
      [this](const std::string& site, const ControlMessage& m) { send(site, m); },
      [this](const std::string& line) {
        note(line);
        // A paused job says so in `geoloco status` too.
        if (line.rfind("paused:", 0) == 0 && job_state_ == JobState::running) {
          message_ = line;
          changed_.notify_all();
        }
      });
  if (!role.ok()) return role.status();
  role_ = std::shared_ptr<CoordinatorRole>(std::move(*role));
  if (run_now)
    asio::co_spawn(
        env_.executor, [keep = shared_from_this(), role = role_]() -> asio::awaitable<void> { co_await role->run(); },
        asio::detached);
  return {};
}

void JobRun::stop_role(const std::string& why) {
  if (!role_) return;
  note(cat("this site stops coordinating the job: ", why));
  role_->stop();  // its run() holds it until it returns
  role_.reset();
}

bool JobRun::admit(const std::string& from, const ControlMessage& message) {
  const std::uint64_t* epoch = std::visit(
      Overload{[](const PlanMessage& m) { return &m.epoch; }, [](const CommittedMessage& m) { return &m.epoch; },
               [](const AbortMessage& m) { return &m.epoch; },
               [](const auto&) -> const std::uint64_t* { return nullptr; }},
      message);
  if (!epoch) return true;
  Status admitted = succession_->admit(from, *epoch, Clock::now());
  step_succession();  // a newer office: followed before the message is taken
  if (admitted.ok()) return true;
  if (env_.metrics) (void)env_.metrics->add("geoloco_fenced_messages_total", {{"job", spec_.name}}, 1);
  note(cat("refused ", control_type_name(message), " from ", from, ": ", admitted.message()));
  return false;
}

void JobRun::journal_refused(const std::string& status_line) {
  if (env_.metrics) (void)env_.metrics->add("geoloco_journal_write_failures_total", {{"job", spec_.name}}, 1);
  if (!status_line.empty() && job_state_ == JobState::running && message_ != status_line) {
    message_ = status_line;
    changed_.notify_all();
  }
}

void JobRun::journal_written() {
  if (job_state_ == JobState::running &&
      (message_.rfind("paused: cannot journal", 0) == 0 || message_.rfind("cannot journal", 0) == 0)) {
    message_.clear();
    changed_.notify_all();
  }
}

bool JobRun::journal_pending_commit(const PendingCommit& p) {
  if (journaled_pending_ && journaled_pending_->round == p.round && journaled_pending_->attempt == p.attempt)
    return true;
  PendingRecord record{false, p, std::nullopt};
  // The plan it answers, so that a restart that rebuilds the round from the
  // round log before applying it lists and records it as applied.
  if (plan_.round == p.round && plan_.attempt == p.attempt)
    record.plan = PendingPlan{plan_.participants,  plan_.late, plan_.weights, plan_.tokens_each,
                              plan_.anchor_rounds, plan_.loss, plan_.epoch,   coordinator()};
  if (Status s = journal_->append(to_json(record)); !s.ok()) {
    // Not sent: a successor could not learn of it. The machine tries the
    // record and its COMMIT again at the next resend.
    note(cat("the COMMIT of round ", p.round, " is not sent: it cannot be journaled (", s.message(),
             "); tried again at the next resend"));
    journal_refused(cat("paused: cannot journal the COMMIT of round ", p.round, " (", s.message(),
                        "); it is not sent, and tried again at the next resend"));
    return false;
  }
  journal_written();
  journaled_pending_ = p;
  return true;
}

void JobRun::journal_pending_cleared() {
  if (!journaled_pending_ || machine_->pending_commit()) return;
  if (Status s = journal_->append(to_json(PendingRecord{true, {}, std::nullopt})); !s.ok())
    spdlog::error("[{}] cannot journal that round {} is settled: {}", spec_.name, journaled_pending_->round,
                  s.message());
  journaled_pending_.reset();
}

void JobRun::journal_committed(const CommittedRecord& record) {
  if (record.round <= journal_->committed_round()) return;  // the role journaled it
  if (Status s = journal_->append(to_json(record)); !s.ok()) {
    spdlog::error("[{}] cannot journal round {}: {}", spec_.name, record.round, s.message());
    journal_refused(cat("cannot journal that round ", record.round, " committed (", s.message(),
                        "); a successor this site votes for may not learn it from this site"));
  } else {
    journal_written();
  }
}

void JobRun::answer_round_query(const std::string& from, const RoundQueryMessage& query) {
  if (!journal_ || std::find(spec_.sites.begin(), spec_.sites.end(), from) == spec_.sites.end()) return;
  if (auto outcome = round_outcome(*journal_, query.round)) send(from, *outcome);
}

}  // namespace geoloco::daemon
