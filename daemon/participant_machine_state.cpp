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

namespace {
// Frames of an offered state, anchor and momentum.
std::uint64_t state_frames(const StateOfferMessage& offer) {
  return offer.chunk_values == 0 ? 0 : 2 * ((offer.values + offer.chunk_values - 1) / offer.chunk_values);
}
// From this many frames on, the other holders are asked to send shares too
// (a holder has a frame in flight on each of its connections, 4 by default:
// a share of fewer frames than that is on the wire already).
constexpr std::uint64_t kFramesWorthHelp = 8;
}  // namespace

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
  const bool arriving = transferring_ && !donors_.empty() && now - progress_at_ < options_.state_stall_ms;
  if (arriving && transfer_round_ == offer.round) {
    if (donors_.count(from)) return;  // the same state again
    // Another holder of the state that is arriving: it sends a share of
    // what is missing, and the others' shares shrink (StateTransfers).
    // A newcomer takes frames from the others' shares, never gives them any.
    donors_[from] = {now, false};
    note(cat(from, " helps with the state of round ", offer.round));
    act(ReceiveState{from, offer});
    return;
  }
  if (arriving) {
    note(cat(from, " offers round ", offer.round, "; the state of round ", transfer_round_, " is arriving"));
    return;
  }
  // A stalled transfer of the same round goes on from the new offer with
  // the frames it has (StateTransfers keeps them when the state is the
  // same); one of another round is of no use any more.
  if (transferring_ && transfer_round_ != offer.round) {
    act(DropTransfer{});
    helpers_asked_ = false;
  } else if (transferring_) {
    for (const auto& [peer, at] : donors_) act(ReleaseDonor{peer, false});  // all go: the new one takes what is missing
  }
  donors_.clear();
  asks_of_source_ = 0;
  transferring_ = true;
  donors_[from] = {now, false};
  transfer_round_ = offer.round;
  progress_at_ = now;
  act(ReceiveState{from, offer});
  // A large state comes sooner from every holder at once: the other sites
  // are asked too, and each that holds it sends a share.
  if (!helpers_asked_ && state_frames(offer) >= kFramesWorthHelp) {
    helpers_asked_ = true;
    for (const auto& s : options_.sites)
      if (s != options_.self && s != from && !unable_.count(s)) act(Send{s, StateRequestMessage{options_.job}});
  }
}

void ParticipantMachine::on_state_progress(const std::string& from, Clock::time_point now) {
  if (!transferring_) return;
  progress_at_ = now;
  if (auto it = donors_.find(from); it != donors_.end()) it->second.at = now;
}

void ParticipantMachine::on_state_share_done(const std::string& peer) {
  if (auto it = donors_.find(peer); transferring_ && it != donors_.end()) it->second.done = true;
}

void ParticipantMachine::on_state_helper_refused(const std::string& peer, const std::string& why) {
  if (!transferring_ || !donors_.erase(peer)) return;
  note(why);
}

void ParticipantMachine::on_state_arrived(const HeldState& state) {
  if (where_ != Where::catching_up || !transferring_) return;
  transferring_ = false;
  donors_.clear();
  helpers_asked_ = false;
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
  if (!transferring_) return;
  std::string from;
  for (const auto& [peer, at] : donors_) from += cat(from.empty() ? "" : " and ", peer);
  note(cat("state transfer", from.empty() ? "" : cat(" from ", from), " abandoned: ", why));
  transferring_ = false;
  donors_.clear();
  helpers_asked_ = false;
}

}  // namespace geoloco::daemon
