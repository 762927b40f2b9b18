// ParticipantMachine's side that time drives (participant_machine.h): READY
// resent until a PLAN, COMMIT until COMMITTED (and as the question about a
// round whose fate this site lost track of), the state asked for again.
#include <algorithm>

#include "daemon/participant_machine.h"

namespace geoloco::daemon {

using namespace participant;

void ParticipantMachine::consider_phase(Clock::time_point now, std::optional<Clock::time_point>& wake) {
  if (counted_in_ || doubted_round()) return;  // known: counted; or its fate is asked for (step())
  const std::uint64_t round = held_->round + 1;
  if (phase_->round > round) {
    catch_up(cat("the trainer finished round ", phase_->round, " while this site holds round ", held_->round));
    return;
  }
  const std::uint64_t late = round - phase_->round;
  const auto& straggler = options_.straggler;
  switch (diloco::late_work(late, straggler, options_.fragments)) {
    case diloco::LateWork::drop:
      if (streaming())
        note(cat("dropped this site's late fragment ", phase_->fragment, " of round ", phase_->round, ": ",
                 phase_->tokens, " tokens (", late,
                 " round(s) late; with streaming a late fragment is always dropped)"));
      else
        note(cat("dropped this site's late work: ", phase_->tokens, " tokens trained from the anchor of round ",
                 phase_->round, " (", late, " round(s) late, policy ",
                 straggler.policy == diloco::StragglerPolicy::drop ? "drop" : "carry", ")"));
      drop_phase(streaming() ? cat("a late fragment (", late, " round(s) late) is always dropped with streaming")
                             : cat(late, " round(s) late, policy ",
                                   straggler.policy == diloco::StragglerPolicy::drop ? "drop" : "carry"));
      release_trainer(false);
      return;
    case diloco::LateWork::carry:
      if (ready_round_ != round)
        note(cat("late work joins round ", round, ": trained from the anchor of round ", phase_->round));
      break;
    case diloco::LateWork::on_time:
      break;
  }
  if (ready_round_ != round || !ready_at_ || now - *ready_at_ >= options_.ready_resend_ms) {
    ready_round_ = round;
    ready_at_ = now;
    const auto work = diloco::reported_work(phase_->tokens, phase_->loss);
    send_coordinator(ReadyMessage{round, phase_->round, work.tokens, options_.inner_steps, work.loss});
  }
  wake = *ready_at_ + options_.ready_resend_ms;
}

void ParticipantMachine::ask_for_state(Clock::time_point now, std::optional<Clock::time_point>& wake) {
  // A holder that sent nothing for the stall time, its share not all in,
  // while others are there, has stopped: its share goes to them (one whose
  // share was all in gets the stall time anew for the frames it is given);
  // the last one is waited for below.
  // The holders share this site's downlink: with k of them each one's
  // frames come k times as far apart, so each gets k times the stall time;
  // and when nothing came from anyone for the stall time, every holder that
  // still owes frames is silent, and those whose shares are in take them.
  const Millis allowance = quiet_allowance();
  const auto silent_after = allowance * static_cast<long>(std::max<std::size_t>(donors_.size(), 1));
  for (auto it = donors_.begin(); transferring_ && donors_.size() > 1 && it != donors_.end();) {
    // (A release re-arms the holders that take its frames: not quiet any more.)
    const bool all_quiet = now - progress_at_ >= allowance;
    if (it->second.done || (now - it->second.at < silent_after && !all_quiet)) {
      ++it;
      continue;
    }
    note(cat(it->first, " sent no state frame for ", std::chrono::duration_cast<Millis>(now - it->second.at).count(),
             " ms; its share goes to the others"));
    act(ReleaseDonor{it->first});
    it = donors_.erase(it);
    for (auto& [peer, d] : donors_) {
      if (d.done) {
        d.at = now;
        d.done = false;
      }
      progress_at_ = std::max(progress_at_, d.at);  // the transfer waits for those still in it
    }
  }
  // One transfer at a time: while one is arriving, asking again (or another
  // site) would only start a second one over the same links.
  if (transferring_ && !donors_.empty() && now - progress_at_ < quiet_allowance()) {
    wake = progress_at_ + quiet_allowance();
    if (donors_.size() > 1) {
      const auto silent = quiet_allowance() * static_cast<long>(donors_.size());
      for (const auto& [peer, d] : donors_)
        if (!d.done) wake = std::min(*wake, d.at + silent);
    }
    return;
  }
  const auto last = asked_at_ ? std::max(*asked_at_, progress_at_) : Clock::time_point{};
  if (asked_at_ && now - last < options_.state_retry_ms) {
    wake = last + options_.state_retry_ms;
    return;
  }
  // The coordinator holds the committed state; a coordinator catching up,
  // a site without a coordinator (an election), and a site whose source
  // stalled mid-transfer, said it has none, or did not answer three times,
  // ask the other sites in turn: any holder of the committed round will do,
  // and a transfer broken off goes on from the next with what arrived.
  const bool stalled = transferring_ && now - progress_at_ >= quiet_allowance();
  if (stalled || (!source_.empty() && unable_.count(source_))) asks_of_source_ = 3;
  std::string source = source_.empty() ? options_.coordinator : source_;
  if (is_coordinator() || source.empty() || source == options_.self || asks_of_source_ >= 3) {
    std::vector<std::string> others;
    for (const auto& s : options_.sites)
      if (s != options_.self) others.push_back(s);
    if (others.empty()) {
      // A job of one site that lost its state: nobody can give it back.
      end(JobEnd::failed, cat("this site has no usable state of round ", known_committed_,
                              " (its checkpoint is missing, damaged or older than the journal) and the job has no "
                              "other site to take it from; restore the checkpoint, or run the job under a new name"));
      return;
    }
    if (unable_.size() == others.size() && !told_nobody_) {
      note(cat("no site can give the state of round ", known_committed_,
               " now: every other site is catching up "
               "or holds none; the job waits for one that does"));
      told_nobody_ = true;
    }
    auto it = std::find(others.begin(), others.end(), source_);
    source = (it == others.end() || std::next(it) == others.end()) ? others.front() : *std::next(it);
  }
  asks_of_source_ = source == source_ ? asks_of_source_ + 1 : 1;
  source_ = source;
  asked_at_ = now;
  act(Send{source, state_request()});
  wake = now + options_.state_retry_ms;
}

void ParticipantMachine::ask_about(std::uint64_t round, Clock::time_point now, std::optional<Clock::time_point>& wake) {
  if (asked_round_ != round) {
    asked_round_ = round;
    doubt_asked_at_.reset();
    doubt_questions_ = 0;
    std::string attempts;
    for (const auto& [r, a] : contributed_)
      if (r == round) attempts += cat(attempts.empty() ? "" : ", ", a);
    note(cat("round ", round,
             " is committed, and this site does not know whether by the attempt that holds its phase (", attempts,
             "): the phase is held, and every site is asked"));
  }
  // Every site is asked (this one too: its own journal may know): any
  // whose journal records the round answers, and the first answer settles it.
  if (!doubt_asked_at_ || now - *doubt_asked_at_ >= options_.ready_resend_ms) {
    doubt_asked_at_ = now;
    ++doubt_questions_;
    for (const auto& site : options_.sites) act(Send{site, RoundQueryMessage{round}});
  }
  const auto next = *doubt_asked_at_ + options_.ready_resend_ms;
  wake = wake ? std::min(*wake, next) : next;
}

ParticipantMachine::Actions ParticipantMachine::step(Clock::time_point now) {
  std::optional<Clock::time_point> wake;
  // Idle behind a round known to be committed (its COMMITTED came while an
  // exchange that then failed still ran, or while an older state arrived):
  // nothing will apply it here; the state will.
  if (where_ == Where::idle && known_committed_ > held_->round)
    catch_up(cat("round ", known_committed_, " is committed and this site holds round ", held_->round));
  if (counted_in_ && where_ == Where::idle && holds_current() && held_->round >= *counted_in_) {
    counted_in_.reset();  // its phase is in a round this site now holds: the trainer moves on
    release_trainer(false);
  }
  if (where_ == Where::idle && phase_) consider_phase(now, wake);
  if (where_ == Where::committing) {
    // COMMIT, and again every resend interval: the coordinator may have
    // missed it, or restarted. An observer's COMMIT counts toward the
    // majority that must hold a round's outcome.
    if (!commit_sent_at_ || now - *commit_sent_at_ >= options_.ready_resend_ms) {
      commit_sent_at_ = now;
      const CommitMessage commit{plan_->round, digest_, plan_->attempt};
      const std::pair<std::uint64_t, std::uint64_t> attempt{plan_->round, plan_->attempt};
      if (commit_journaled_ == attempt) {
        send_coordinator(commit);
      } else {
        commit_journaled_ = attempt;  // unless the wiring says otherwise
        act(JournalCommit{*pending_commit(), options_.coordinator, commit});
      }
    }
    wake = *commit_sent_at_ + options_.ready_resend_ms;
  }
  if (where_ == Where::catching_up) ask_for_state(now, wake);
  if (const auto round = doubted_round(); round && where_ != Where::finished && where_ != Where::ended) {
    ask_about(*round, now, wake);
    if (finish_waits_ && doubt_questions_ >= kDoubtQuestionsAtEnd) finish();  // no answer: it ends, and says so
  }
  Actions out;
  out.actions = std::move(actions_);
  out.notes = std::move(notes_);
  out.wake_at = wake;
  actions_.clear();
  notes_.clear();
  return out;
}

}  // namespace geoloco::daemon
