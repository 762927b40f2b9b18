#include "daemon/participant_machine.h"

#include <algorithm>
#include <utility>

#include "common/overload.h"

namespace geoloco::daemon {

using namespace participant;

namespace {
bool named(const std::vector<std::string>& names, const std::string& site) {
  return std::find(names.begin(), names.end(), site) != names.end();
}
}  // namespace

ParticipantOptions participant_options(const job::JobSpec& job, const std::string& self, Millis ready_resend) {
  ParticipantOptions o;
  o.job = job.name;
  o.self = self;
  o.coordinator = job.coordinator;
  o.named = job.coordinator;
  o.sites = job.sites;
  o.fragments = job.fragments();
  o.straggler = job.outer.straggler;
  o.inner_steps = job.outer.inner.steps;
  o.ready_resend_ms = ready_resend;
  return o;
}

std::string_view ParticipantMachine::where_name(Where w) {
  switch (w) {
    case Where::awaiting_initial:
      return "awaiting_initial";
    case Where::catching_up:
      return "catching_up";
    case Where::idle:
      return "idle";
    case Where::exchanging:
      return "exchanging";
    case Where::unwinding:
      return "unwinding";
    case Where::committing:
      return "committing";
    case Where::applying:
      return "applying";
    case Where::finished:
      return "finished";
    case Where::ended:
      return "ended";
  }
  return "unknown";
}

ParticipantMachine::ParticipantMachine(ParticipantOptions options, std::optional<HeldState> checkpoint,
                                       std::optional<HeldState> journal, std::uint64_t checkpoint_every,
                                       Clock::time_point)
    : options_(std::move(options)),
      checkpoint_every_(checkpoint_every),
      where_(Where::awaiting_initial),
      held_(std::move(checkpoint)) {
  send_coordinator(JoinMessage{options_.job, held_ ? held_->round : 0, held_ ? held_->digest : std::string()});
  if (journal) journal_round_ = journal->round;
  if (!is_coordinator()) {
    // Every other site takes the committed state from the coordinator: its
    // own checkpoint may be any number of rounds old.
    catch_up(held_ ? cat("this site's checkpoint holds round ", held_->round, "; asking ", options_.coordinator,
                         " for the committed state")
                   : cat("asking ", options_.coordinator, " for the committed state"));
    return;
  }
  const std::uint64_t committed = journal ? journal->round : 0;
  known_committed_ = committed;
  // A new job's anchor is the named coordinator's trainer's initialization;
  // a successor that holds the office before round 1 takes it from a peer.
  const bool initializes = options_.named.empty() || options_.named == options_.self;
  if (!held_ && committed == 0 && !initializes) {
    catch_up("the job's first anchor comes from its named coordinator's trainer; asking the other sites for it");
    return;
  }
  if (!held_ && committed == 0) {
    where_ = Where::awaiting_initial;
    note("waiting for the trainer's initial parameters");
    return;
  }
  if (held_ && held_->round == committed && (committed == 0 || held_->digest == journal->digest)) {
    where_ = Where::idle;
    welcome_trainer();
    note(cat("resumed from the checkpoint of round ", held_->round));
    return;
  }
  // The journal is the truth: a checkpoint behind it, or one whose anchor is
  // not the committed one, is not used; the state comes from a peer.
  if (!held_) catch_up(cat("the journal's last committed round is ", committed, " and no usable checkpoint is here"));
  else if (held_->round != committed)
    catch_up(cat("the checkpoint holds round ", held_->round, ", the journal's last committed round is ", committed));
  else
    catch_up(cat("the checkpoint's anchor of round ", committed, " is ", held_->digest, ", the journal committed ",
                 journal->digest));
}

bool ParticipantMachine::holds_current() const {
  return held_ && where_ != Where::catching_up && where_ != Where::awaiting_initial && where_ != Where::ended;
}

std::string_view ParticipantMachine::heartbeat_phase() const {
  if (where_ == Where::exchanging || where_ == Where::unwinding || where_ == Where::committing ||
      where_ == Where::applying)
    return "exchange";
  if (phase_) return "ready";
  if (where_ == Where::catching_up) return "catching_up";
  return holds_current() ? "inner" : "idle";
}

// ------------------------------------------------------------------ inputs

void ParticipantMachine::on_initial_parameters(const HeldState& initial) {
  if (where_ != Where::awaiting_initial) return;
  held_ = initial;
  act(PublishInitial{});
  trainer_round_ = initial.round + 1;
  where_ = Where::idle;
  note(cat("initial anchor from the trainer, digest ", initial.digest));
  offer_to_waiting();
}

void ParticipantMachine::on_phase(const PhaseReport& phase) {
  if (where_ == Where::finished || where_ == Where::ended) return;
  phase_ = phase;
}

Status ParticipantMachine::on_plan(const std::string& from, const PlanMessage& plan) {
  GEOLOCO_RETURN_IF(from != options_.coordinator, Err::invalid_argument, "PLAN of round ", plan.round, " from ", from,
                    ", which is not the coordinator (", options_.coordinator, ")");
  if (where_ == Where::applying) {
    held_messages_.emplace_back(from, plan);
    return {};
  }
  // The newest plan seen, whatever is done with it: what a vote reports (a
  // plan of round R proves R - 1 committed).
  if (!newest_seen_ || std::pair(plan.round, plan.attempt) > *newest_seen_) newest_seen_ = {plan.round, plan.attempt};
  // A newer attempt of the round whose COMMIT is pending: that COMMIT is void.
  if (commit_in_doubt_ && plan.round == commit_in_doubt_->round && plan.attempt > commit_in_doubt_->attempt)
    commit_in_doubt_.reset();
  // A plan of round R means round R - 1 is committed: a state older than that is of no use.
  if (plan.round > 0) known_committed_ = std::max(known_committed_, plan.round - 1);
  if (!holds_current() || where_ == Where::finished) {
    // Catching up: the round goes on without us. Counted on as a participant
    // (a READY from before a restart), say so at once: the others need not
    // wait for our share until their exchange times out.
    if ((where_ == Where::catching_up || where_ == Where::awaiting_initial) && named(plan.participants, options_.self))
      send_coordinator(FailedMessage{plan.round, plan.attempt, cat(options_.self, " is catching up")});
    decline(plan);
    return {};
  }
  const std::uint64_t r = held_->round;
  if (plan.round <= r) {
    decline(plan);  // an old plan
    return {};
  }
  if (plan.round > r + 1) {
    decline(plan);
    doubt_commit();
    catch_up(cat("PLAN of round ", plan.round, " while this site holds round ", r));
    return {};
  }
  // Attempts of a round only grow (the coordinator never reuses one, even
  // after a restart): a PLAN older than one already seen is a repeat that
  // arrived late, e.g. the queued copy of a PLAN also sent at once.
  if (newest_plan_ && newest_plan_->first == plan.round && plan.attempt < newest_plan_->second) return {};
  // The other copy of a plan declined while catching up (the coordinator
  // sends each PLAN twice): its exchange's frames were dropped, so taking
  // part now would wait for them in vain. Its COMMITTED makes this site
  // catch up instead.
  if (declined_plan_ && *declined_plan_ == std::pair<std::uint64_t, std::uint64_t>(plan.round, plan.attempt)) {
    decline(plan);
    return {};
  }
  newest_plan_ = std::pair<std::uint64_t, std::uint64_t>(plan.round, plan.attempt);
  const bool same_attempt = plan_ && plan_->round == plan.round && plan_->attempt == plan.attempt;
  switch (where_) {
    case Where::exchanging:
      if (same_attempt) return {};
      // A new attempt: the coordinator aborted ours (its ABORT was lost or
      // is behind this). Our exchange unwinds first; then this plan.
      where_ = Where::unwinding;
      after_ = After::plan;
      next_plan_ = plan;
      act(CancelExchange{plan_->round, plan_->attempt,
                         cat("round ", plan.round, " is planned again (attempt ", plan.attempt, ")")});
      return {};
    case Where::unwinding:
      if (after_ == After::catch_up) {
        decline(plan);
        return {};
      }
      if (next_plan_) decline(*next_plan_);  // superseded before it began
      after_ = After::plan;
      next_plan_ = plan;
      return {};
    case Where::committing:
      if (same_attempt) return {};
      // Our COMMITTED was lost and the coordinator planned the round again: an abort in effect.
      note(cat("round ", plan.round, " is planned again (attempt ", plan.attempt, "): this site's attempt ",
               plan_->attempt, " is void"));
      become_idle();
      break;
    default:
      break;
  }
  start_plan(plan);
  return {};
}

void ParticipantMachine::decline(const PlanMessage& plan) {
  if (named(plan.participants, options_.self) || named(plan.late, options_.self))
    act(DeclineExchange{plan.round, plan.attempt});
  declined_plan_ = std::pair<std::uint64_t, std::uint64_t>(plan.round, plan.attempt);
}

void ParticipantMachine::start_plan(const PlanMessage& plan) {
  const bool participant = named(plan.participants, options_.self);
  if (!participant && !named(plan.late, options_.self)) return;  // not ours to take part in
  if (participant && (!phase_ || phase_->round > plan.round)) {
    // The coordinator counts on a Δ this site does not have (e.g. its READY
    // came from before a restart): say so, so the round is planned again now.
    const std::string why = cat(options_.self, " has no finished phase for round ", plan.round);
    note(cat("named a participant of round ", plan.round, " without a finished phase here; reported"));
    send_coordinator(FailedMessage{plan.round, plan.attempt, why});
    decline(plan);
    return;
  }
  if (participant) {
    // The plan counts a phase by the READY it heard: one from before a
    // restart, or of a phase since dropped, stands for other work than the
    // Δ this site holds. Its weight and the history's ledger would be wrong.
    const auto at =
        std::find(plan.participants.begin(), plan.participants.end(), options_.self) - plan.participants.begin();
    const std::uint64_t tokens = diloco::reported_work(phase_->tokens, phase_->loss).tokens;
    const std::uint64_t planned_round = plan.anchor_rounds.at(static_cast<std::size_t>(at));
    const std::uint64_t planned_tokens = plan.tokens_each.at(static_cast<std::size_t>(at));
    if (planned_round != phase_->round || planned_tokens != tokens) {
      const std::string why = cat("the plan of round ", plan.round, " counts ", planned_tokens, " tokens of ",
                                  options_.self, " trained for round ", planned_round, "; its finished phase has ",
                                  tokens, " tokens trained for round ", phase_->round);
      note(cat(why, "; reported"));
      send_coordinator(FailedMessage{plan.round, plan.attempt, why});
      decline(plan);
      ready_round_ = 0;  // READY again at once, for the phase this site has
      return;
    }
  }
  plan_ = plan;
  participant_ = participant;
  if (participant) contributed_.insert({plan.round, plan.attempt});
  early_commit_.reset();
  where_ = Where::exchanging;
  act(StartExchange{plan, participant});
}

Status ParticipantMachine::on_committed(const std::string& from, const CommittedMessage& c) {
  GEOLOCO_RETURN_IF(from != options_.coordinator, Err::invalid_argument, "COMMITTED of round ", c.round, " from ", from,
                    ", which is not the coordinator (", options_.coordinator, ")");
  if (where_ == Where::applying) {
    held_messages_.emplace_back(from, c);
    return {};
  }
  if (where_ == Where::ended || where_ == Where::finished) return {};
  if (commit_in_doubt_ && c.round >= commit_in_doubt_->round) commit_in_doubt_.reset();  // its outcome is known
  if (c.final) final_round_ = c.round;
  known_committed_ = std::max(known_committed_, c.round);
  if (restored_vote_ && c.round >= restored_vote_->round) {
    if (commits_restored_vote(c) && (where_ == Where::idle || where_ == Where::catching_up)) {
      apply_logged(c);
      return {};
    }
    restored_vote_.reset();  // another outcome: the state comes as it would without the vote
  }
  // Ours: the round in hand, and the attempt in hand when the COMMITTED names one.
  const bool ours = holds_current() && c.round == held_->round + 1 && plan_ && plan_->round == c.round &&
                    (!c.attempt || *c.attempt == plan_->attempt);
  // The attempt named settles the phase's attempts of that round, except
  // the one this site is exchanging or will apply (applying releases it).
  const bool applies = ours && participant_ &&
                       (where_ == Where::exchanging || (where_ == Where::committing && digest_ == c.anchor_digest));
  if (c.attempt && !applies) {
    settle(c.round, *c.attempt, "");
    if (where_ == Where::finished) return {};  // the end that waited for this answer
  }
  if (!holds_current()) return {};  // catching up: what arrives next is at least this round
  const std::uint64_t r = held_->round;
  if (c.round <= r) {
    if (final_round_ && *final_round_ == r) finish();
    return {};
  }
  if (ours && where_ == Where::exchanging) {
    early_commit_ = c;  // an observer still receiving the average: applied once it is in
    return {};
  }
  if (ours && where_ == Where::committing) {
    if (digest_ == c.anchor_digest) {
      apply(c);
      return {};
    }
    catch_up(
        cat("this site computed anchor ", digest_, " for round ", c.round, ", the committed one is ", c.anchor_digest));
    return {};
  }
  // A round this site had no part in, or one whose exchange it gave up while
  // its Δ went in (a successor completed an attempt this site saw fail:
  // settled above).
  doubt_commit();
  catch_up(cat("round ", c.round, " was committed without this site"));
  return {};
}

Status ParticipantMachine::on_abort(const std::string& from, const AbortMessage& a) {
  GEOLOCO_RETURN_IF(from != options_.coordinator, Err::invalid_argument, "ABORT of round ", a.round, " from ", from,
                    ", which is not the coordinator (", options_.coordinator, ")");
  if (where_ == Where::applying) {
    held_messages_.emplace_back(from, a);
    return {};
  }
  if (commit_in_doubt_ && a.round == commit_in_doubt_->round && a.attempt == commit_in_doubt_->attempt)
    commit_in_doubt_.reset();
  if (!holds_current() || where_ == Where::finished || a.round != held_->round + 1) return {};
  // An ABORT of an attempt older than a PLAN already seen came late (the
  // PLAN is also sent at once, past the queue it waited in): it must not
  // void the newer attempt.
  if (newest_plan_ && newest_plan_->first == a.round && a.attempt < newest_plan_->second) return {};
  note(cat("round ", a.round, " aborted: ", a.reason));
  act(Record{history::Aborted{a.round, a.attempt, a.reason}});
  ready_round_ = 0;  // READY again at once
  if (where_ == Where::exchanging || where_ == Where::unwinding) {
    // The ABORT is of the latest plan: one queued behind the exchange goes too.
    if (where_ == Where::unwinding && next_plan_) decline(*next_plan_);
    if (where_ == Where::exchanging) act(CancelExchange{plan_->round, plan_->attempt, cat("aborted: ", a.reason)});
    if (where_ == Where::exchanging || after_ != After::catch_up) after_ = After::idle;
    where_ = Where::unwinding;
    next_plan_.reset();
  } else if (where_ == Where::committing) {
    become_idle();
  }
  return {};
}

void ParticipantMachine::on_exchange_done(std::uint64_t round, std::uint64_t attempt, const Result<std::string>& digest,
                                          bool own_fault) {
  if (!plan_ || plan_->round != round || plan_->attempt != attempt) return;
  if (where_ == Where::unwinding) {
    const After after = after_;
    std::optional<PlanMessage> next = std::move(next_plan_);
    become_idle();
    if (after == After::catch_up) catch_up(catch_up_why_);
    else if (after == After::plan && next) start_plan(*next);
    return;
  }
  if (where_ != Where::exchanging) return;
  if (!digest.ok()) {
    note(cat("the exchange of round ", round, " failed: ", digest.status().message()));
    if (participant_) send_coordinator(FailedMessage{round, attempt, digest.status().message(), own_fault});
    become_idle();
    return;
  }
  digest_ = *digest;
  where_ = Where::committing;
  commit_sent_at_.reset();  // COMMIT at the next step
  if (early_commit_) {
    const CommittedMessage c = *early_commit_;
    early_commit_.reset();
    (void)on_committed(options_.coordinator, c);
  }
}

void ParticipantMachine::on_applied(const Status& applied) {
  if (where_ != Where::applying) return;
  const auto pending = std::exchange(pending_end_, std::nullopt);
  if (!applied.ok()) {
    // The step computed aside gave the committed digest; in place it did
    // not: the state is no longer any round's. Nothing of it is saved, and
    // the site resumes from its last checkpoint and the peers when restarted.
    where_ = Where::ended;
    act(EndJob{JobEnd::failed, cat("internal error applying round ", plan_->round, ": ", applied.message()), false});
    return;
  }
  const PlanMessage plan = *plan_;
  const bool participant = participant_;
  const bool final = final_round_ && *final_round_ == plan.round;
  held_ = HeldState{plan.round, digest_};
  become_idle();
  if (pending && !final) {  // ended while the step ran: now, with the round it gave
    end(pending->first, pending->second);
    return;
  }
  if (participant) release_trainer(final);
  // Asked for the state while the step ran: answered with the state it gave.
  const auto asked = std::exchange(waiting_for_state_, {});
  if (final) finish();
  else if (checkpoint_every_ > 0 && plan.round % checkpoint_every_ == 0) act(SaveCheckpoint{});
  for (const auto& [peer, request] : asked) on_state_request(peer, request);
  take_held_messages();
}

void ParticipantMachine::take_held_messages() {
  auto held = std::exchange(held_messages_, {});
  if (where_ == Where::ended) return;
  for (const auto& [from, message] : held) {
    const Status taken = std::visit(Overload{[&](const PlanMessage& m) { return on_plan(from, m); },
                                             [&](const CommittedMessage& m) { return on_committed(from, m); },
                                             [&](const AbortMessage& m) { return on_abort(from, m); }},
                                    message);
    if (!taken.ok()) note(cat("a message held while the step was applied: ", taken.message()));
  }
}

void ParticipantMachine::on_trainer_failed(const std::string& why) {
  if (where_ == Where::finished || where_ == Where::ended) return;
  end(JobEnd::failed, cat("the trainer failed: ", why));
}

void ParticipantMachine::on_office(const std::string& coordinator) {
  if (coordinator == options_.coordinator) return;
  options_.coordinator = coordinator;
  // Held while a step was applied, from an office that has changed hands
  // since (perhaps in an epoch now fenced off): void. The new office plans
  // and commits afresh, and this site tells it where it stands.
  held_messages_.clear();
  ready_round_ = 0;         // READY again at once
  commit_sent_at_.reset();  // COMMIT again at once
  doubt_asked_at_.reset();
  asked_at_.reset();  // and the state, if this site is catching up: from the new holder first
  source_.clear();
  asks_of_source_ = 0;
}

void ParticipantMachine::on_commit_unjournaled() { commit_journaled_.reset(); }

std::optional<PendingCommit> ParticipantMachine::pending_commit() const {
  // Applying, the vote stays journaled until the round it committed is
  // (the step runs off the loop meanwhile): the journal never holds neither.
  if ((where_ == Where::committing || (where_ == Where::applying && !logged_round_)) && plan_)
    return PendingCommit{plan_->round, plan_->attempt, digest_, plan_->tokens, participant_};
  if (commit_in_doubt_ && !(held_ && holds_current() && held_->round >= commit_in_doubt_->round))
    return commit_in_doubt_;
  return std::nullopt;
}

void ParticipantMachine::on_stop(JobEnd how, const std::string& reason) {
  if (where_ == Where::finished || where_ == Where::ended) return;
  end(how, reason);
}

// ------------------------------------------------------------- transitions

void ParticipantMachine::welcome_trainer() {
  trainer_round_ = held_->round + 1;
  act(WelcomeTrainer{trainer_round_});
}

void ParticipantMachine::drop_round() {
  // The averaged Δ of the round in hand is no longer needed (applied, or void).
  if (plan_) act(ForgetExchange{});
  plan_.reset();
  participant_ = false;
  early_commit_.reset();
  digest_.clear();
}

void ParticipantMachine::become_idle() {
  drop_round();
  where_ = Where::idle;
  participant_ = false;
  early_commit_.reset();
  next_plan_.reset();
  after_ = After::idle;
  digest_.clear();
  ready_round_ = 0;  // READY again at once
}

void ParticipantMachine::catch_up(const std::string& why) {
  if (where_ == Where::exchanging || where_ == Where::unwinding) {
    // Installing a state now would pull the buffers from under the exchange:
    // wait for it to end (given up at once).
    if (where_ == Where::unwinding && next_plan_) decline(*next_plan_);
    if (where_ == Where::exchanging) act(CancelExchange{plan_->round, plan_->attempt, cat("catching up: ", why)});
    where_ = Where::unwinding;
    after_ = After::catch_up;
    catch_up_why_ = why;
    next_plan_.reset();
    return;
  }
  if (where_ == Where::catching_up) return;
  note(cat("catching up: ", why));
  drop_round();
  where_ = Where::catching_up;
  asked_at_.reset();  // ask at the next step
  source_.clear();    // the coordinator first
  asks_of_source_ = 0;
  unable_.clear();
  told_nobody_ = false;
}

void ParticipantMachine::apply(const CommittedMessage& c) {
  // A site whose work is not in this round keeps training from the anchor
  // it has: keep that anchor (the base of its late Δ) before the step moves
  // it. (Streaming drops late work, so it needs none.)
  if (!participant_ && trainer_round_ == held_->round + 1 && !streaming()) act(KeepTrainerAnchor{false});

  act(ApplyRound{c, participant_});
  where_ = Where::applying;
}

void ParticipantMachine::release_trainer(bool stop) {
  if (!phase_) return;
  // A phase trained from a newer anchor than the held state (only at the
  // job's end, for a site that just caught up) still needs a later round.
  const std::uint64_t next = std::max(held_->round + 1, phase_->round + 1);
  act(ReleaseTrainer{next, stop});
  trainer_round_ = next;
  phase_.reset();
  contributed_.clear();
}

void ParticipantMachine::drop_phase(const std::string& why) {
  // Counted as READY would have counted it, so the history's ledger balances.
  act(Record{history::Dropped{phase_->round, options_.self, diloco::reported_work(phase_->tokens, 0).tokens, why}});
}

void ParticipantMachine::finish() {
  if (const auto doubted = doubted_round(); doubted && (!finish_waits_ || doubt_questions_ < kDoubtQuestionsAtEnd)) {
    // Whether the phase is in a round decides between releasing it and
    // dropping it: the end waits for a site's answer (journals answer
    // after the job's end too), a few questions at most.
    if (!finish_waits_) {
      note(cat("the job's last round is held; its end waits for a site to say whether round ", *doubted,
               " counted this site's phase"));
      doubt_questions_ = 0;  // the questions asked so far do not count toward the end's
    }
    finish_waits_ = true;
    return;
  }
  finish_waits_ = false;
  note(cat("job finished after round ", held_->round));
  // Work no round took (a straggler's, or a catching-up site's) is dropped,
  // and says so. Work whose round's fate is in doubt may be counted: it is
  // not dropped, and the log says it is unknown.
  if (const auto doubted = doubted_round(); phase_ && doubted)
    note(cat("the job finished before any site said whether round ", *doubted, " counted this site's ", phase_->tokens,
             " tokens"));
  else if (phase_ && !counted_in_)
    drop_phase(cat("the job finished after round ", held_->round, " before this work could join a round"));
  counted_in_.reset();
  release_trainer(true);
  where_ = Where::finished;
  act(EndJob{JobEnd::finished, cat("finished after round ", held_->round), true});
}

void ParticipantMachine::end(JobEnd how, const std::string& reason) {
  if (where_ == Where::applying) {
    // The anchor and momentum are being stepped: no checkpoint of them now.
    if (!pending_end_) pending_end_.emplace(how, reason);
    return;
  }
  // Only committed, current state is checkpointed (what catching up would replace is not).
  const bool checkpoint = holds_current();
  finish_waits_ = false;  // nothing is asked any more
  where_ = Where::ended;
  act(EndJob{how, reason, checkpoint});
}

}  // namespace geoloco::daemon
