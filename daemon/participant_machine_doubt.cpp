// ParticipantMachine's side of a round whose fate this site lost track of
// (participant_machine.h: "a phase is counted once"): a COMMIT in doubt,
// the attempts a phase went into, settled by a COMMITTED or by a site's
// answer about the round.
#include <algorithm>

#include "daemon/participant_machine.h"

namespace geoloco::daemon {

using namespace participant;

void ParticipantMachine::on_round_outcome(const std::string& from, const RoundOutcomeMessage& outcome) {
  if (where_ == Where::finished || where_ == Where::ended) return;
  // Only the round asked about: an answer about any other (a stray or a
  // forged one, or the round in hand) would settle what only its own
  // COMMITTED may. When this site holds that very round, the digest must be its.
  if (std::find(options_.sites.begin(), options_.sites.end(), from) == options_.sites.end() ||
      doubted_round() != outcome.round)
    return;
  if (held_ && holds_current() && held_->round == outcome.round && held_->digest != outcome.anchor_digest) {
    note(cat(from, " says round ", outcome.round, " committed anchor ", outcome.anchor_digest, "; this site holds ",
             held_->digest, ": the answer is not taken"));
    return;
  }
  settle(outcome.round, outcome.attempt, from);
}

void ParticipantMachine::doubt_commit() {
  if (where_ != Where::committing || !plan_) return;
  commit_in_doubt_ = PendingCommit{plan_->round, plan_->attempt, digest_, plan_->tokens, participant_};
  if (participant_)
    note(cat("lost track of round ", plan_->round, " after sending its COMMIT (attempt ", plan_->attempt, ")"));
}

void ParticipantMachine::settle(std::uint64_t round, std::uint64_t attempt, const std::string& from) {
  const auto first = contributed_.lower_bound({round, 0});
  const auto last = contributed_.lower_bound({round + 1, 0});
  if (first == last) return;  // none of the phase's attempts is of that round
  const bool counted = contributed_.count({round, attempt}) > 0;
  contributed_.erase(first, last);
  if (asked_round_ == round) {
    asked_round_ = 0;
    doubt_asked_at_.reset();
    doubt_questions_ = 0;
  }
  if (!phase_ || counted_in_) return;
  const std::string who = from.empty() ? std::string() : cat(" (", from, "'s journal)");
  if (counted) {
    note(cat("round ", round, " committed attempt ", attempt, who, ", which holds this site's phase: it is counted"));
    counted_in_ = round;  // released by step() once this site holds that round or a later one
  } else {
    note(cat("round ", round, " committed attempt ", attempt, who,
             ", which does not hold this site's phase: it is still to be counted"));
    ready_round_ = 0;
  }
  if (finish_waits_ && !doubted_round()) {
    finish_waits_ = false;
    finish();
  }
}

std::optional<std::uint64_t> ParticipantMachine::doubted_round() const {
  if (!phase_ || counted_in_ || contributed_.empty()) return std::nullopt;
  const std::uint64_t round =
      contributed_.begin()->first;                    // the oldest (a phase joins a later round only once settled)
  if (round > known_committed_) return std::nullopt;  // not committed yet: it can still count the phase
  // The round in hand, whose COMMITTED this site holds: applying it settles it.
  const bool in_hand = where_ == Where::exchanging || where_ == Where::committing || where_ == Where::applying;
  if (in_hand && participant_ && plan_ && plan_->round == round) return std::nullopt;
  return round;
}

}  // namespace geoloco::daemon
