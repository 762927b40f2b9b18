// ParticipantMachine's side of STATE_SYNC (participant_machine.h): the state
// asked of it and offered, and the state it takes while catching up, one
// transfer at a time (a stalled one goes on from another holder's offer).
// Asking for the state, which time drives, is participant_machine_step.cpp's.
#include "daemon/participant_machine.h"

namespace geoloco::daemon {

using namespace participant;

void ParticipantMachine::on_state_request(const std::string& from) {
  if (where_ == Where::ended) return;
  if (where_ == Where::finished) {
    // The job ended here: a site that comes back late still gets the final
    // state, and then the final COMMITTED, so it ends the job too.
    act(OfferState{from, ""});
    act(Send{from, CommittedMessage{held_->round, held_->digest, true}});
    return;
  }
  if (holds_current()) {
    act(OfferState{from, ""});
    return;
  }
  act(OfferState{from, held_ ? "this site is catching up itself" : "no committed state yet"});
  // Offered as soon as this site holds it: the asker need not poll for it.
  waiting_for_state_.insert(from);
}

void ParticipantMachine::offer_to_waiting() {
  for (const auto& peer : waiting_for_state_) act(OfferState{peer, ""});
  waiting_for_state_.clear();
}

void ParticipantMachine::on_state_offer(const std::string& from, const StateOfferMessage& offer,
                                        Clock::time_point now) {
  if (where_ != Where::catching_up) return;
  if (!offer.reason.empty()) {
    note(cat(from, " has no state to give yet: ", offer.reason));
    unable_.insert(from);
    return;
  }
  if (offer.round < known_committed_) {
    note(cat(from, " offers round ", offer.round, ", but round ", known_committed_, " is committed; asking again"));
    return;
  }
  const bool arriving = transfer_peer_ && now - progress_at_ < options_.state_stall_ms;
  if (arriving && *transfer_peer_ == from && transfer_round_ == offer.round) return;  // the same state again
  if (arriving) {
    note(cat(from, " offers round ", offer.round, "; a transfer from ", *transfer_peer_, " is arriving"));
    return;
  }
  // A stalled transfer of the same round goes on from the new offer with
  // the frames it has (StateTransfers keeps them when the state is the
  // same); one of another round is of no use any more.
  if (transfer_peer_ && transfer_round_ != offer.round) act(DropTransfer{});
  asks_of_source_ = 0;
  transfer_peer_ = from;
  transfer_round_ = offer.round;
  progress_at_ = now;
  act(ReceiveState{from, offer});
}

void ParticipantMachine::on_state_progress(Clock::time_point now) {
  if (transfer_peer_) progress_at_ = now;
}

void ParticipantMachine::on_state_arrived(const HeldState& state) {
  if (where_ != Where::catching_up || !transfer_peer_) return;
  transfer_peer_.reset();
  // The trainer trains from the anchor held now: keep it as its base.
  if (held_ && trainer_round_ == held_->round + 1) act(KeepTrainerAnchor{true});
  act(InstallState{});
  held_ = state;
  known_committed_ = std::max(known_committed_, state.round);
  become_idle();
  if (trainer_round_ == 0) welcome_trainer();
  // A trainer given an older anchor that has not begun training yet (none
  // attached, or one waiting for its WELCOME) may start from this one
  // instead: the wiring says whether it could (on_trainer_moved()).
  else if (trainer_round_ < state.round + 1 && !phase_) act(MoveTrainer{state.round + 1});
  offer_to_waiting();
  if (final_round_ && state.round >= *final_round_) finish();
}

void ParticipantMachine::on_trainer_moved(std::uint64_t round) {
  if (holds_current() && round == held_->round + 1 && !phase_) trainer_round_ = round;
}

void ParticipantMachine::on_state_failed(const std::string& why) {
  if (!transfer_peer_) return;
  note(cat("state transfer from ", *transfer_peer_, " abandoned: ", why));
  transfer_peer_.reset();
}

}  // namespace geoloco::daemon
