// ParticipantMachine's side of STATE_SYNC (participant_machine.h): the state
// asked of it and offered, and the state it takes while catching up, one
// transfer at a time (a stalled one goes on from another holder's offer).
// Asking for the state, which time drives, is participant_machine_step.cpp's.
// Last, the state a site rebuilds itself: a round it voted for before a
// restart, stepped from its own round log once its outcome names that vote.
#include "daemon/participant_machine.h"
#include "daemon/state_sync.h"

namespace geoloco::daemon {

using namespace participant;

namespace {
// The state offered to the site that sent `request`.
OfferState offer_for(const std::string& peer, const StateRequestMessage& request) {
  std::optional<HeldState> asker;
  if (request.held_round) asker = HeldState{*request.held_round, request.held_digest};
  return OfferState{peer, "", asker, request.listed_round};
}
}  // namespace

void ParticipantMachine::on_state_request(const std::string& from, const StateRequestMessage& request) {
  if (where_ == Where::ended) return;
  if (where_ == Where::finished) {
    // The job ended here: a site that comes back late still gets the final
    // state, and then the final COMMITTED, so it ends the job too.
    act(offer_for(from, request));
    act(Send{from, CommittedMessage{held_->round, held_->digest, true}});
    return;
  }
  if (where_ == Where::applying) {
    // The anchor and momentum are being stepped: offered once they are a
    // round's again (on_applied()).
    waiting_for_state_[from] = request;
    return;
  }
  if (holds_current()) {
    act(offer_for(from, request));
    return;
  }
  act(OfferState{from, held_ ? "this site is catching up itself" : "no committed state yet"});
  // Offered as soon as this site holds it: the asker need not poll for it.
  waiting_for_state_[from] = request;
}

void ParticipantMachine::offer_to_waiting() {
  for (const auto& [peer, request] : waiting_for_state_) act(offer_for(peer, request));
  waiting_for_state_.clear();
}

StateRequestMessage ParticipantMachine::state_request() const {
  StateRequestMessage r{options_.job};
  if (held_ && held_->digest.size() == 16) {  // a digest the wire can carry
    r.held_round = held_->round;
    r.held_digest = held_->digest;
  }
  return r;
}

namespace {
// Frames of an offer: its state's and its round-log entries'.
std::uint64_t state_frames(const StateOfferMessage& offer) { return offer_frames(offer).total; }
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
  // Rounds to step on this site's own state, answering a request made when
  // it held an older one: of no use now (the next request names this one).
  if (offer.from_held && (!held_ || offer.base_round != held_->round || offer.base_digest != held_->digest)) {
    note(cat(from, " offers the rounds after round ", offer.base_round.value_or(0), ", this site holds round ",
             held_ ? held_->round : 0, " now; asking again"));
    return;
  }
  // No entries on this site's own state: the state held here is the one
  // offered (a site restarted on its checkpoint of the committed round).
  // Not while a newer state is coming: that round is committed, so this
  // one is old (a holder a round behind answered too).
  if (offer.from_held && offer.deltas.empty() && offer.round == held_->round) {
    if (transferring_ && transfer_round_ > offer.round) {
      note(cat(from, " says this site's round ", offer.round, " is the one it holds; the state of round ",
               transfer_round_, " is coming"));
      return;
    }
    if (offer.round < journal_round_) {
      note(cat(from, " says this site's round ", offer.round,
               " is the one it holds, but this site's journal has "
               "round ",
               journal_round_, " committed; asking again"));
      return;
    }
    resume_held(from);
    return;
  }
  const bool arriving = transferring_ && !donors_.empty() && now - progress_at_ < quiet_allowance();
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
  // A large state comes sooner from every holder at once: the other sites
  // are asked too, and each that holds it sends a share; until they offer,
  // `from` is asked for its part only (frames it sends are in its links'
  // buffers at once, where no helper can take them over).
  std::vector<std::string> helpers;
  if (!helpers_asked_ && state_frames(offer) >= kFramesWorthHelp) {
    helpers_asked_ = true;
    for (const auto& s : options_.sites)
      if (s != options_.self && s != from && !unable_.count(s)) helpers.push_back(s);
  }
  act(ReceiveState{from, offer, 1 + helpers.size()});
  for (const auto& s : helpers) act(Send{s, state_request()});
}

void ParticipantMachine::on_state_progress(const std::string& from, Clock::time_point now) {
  if (!transferring_) return;
  progress_at_ = now;
  if (auto it = donors_.find(from); it != donors_.end()) {
    Donor& d = it->second;
    // Since its last frame, or since it joined: a first frame that took long
    // to cross the link says as much about the link as any later one.
    d.gap = std::max(d.gap, std::chrono::duration_cast<Millis>(now - d.at));
    d.at = now;
    d.heard = true;
  }
}

Millis ParticipantMachine::quiet_allowance() const {
  Millis gap{0};
  bool heard = false;
  for (const auto& [peer, d] : donors_) {
    gap = std::max(gap, d.gap);
    heard = heard || d.heard;
  }
  if (!heard) return options_.state_stall_ms * 4;
  return std::max(options_.state_stall_ms, gap * 2);
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
  if (restored_vote_ && state.round >= restored_vote_->round) restored_vote_.reset();  // the state holds its round
  // The trainer trains from the anchor held now: keep it as its base.
  if (held_ && trainer_round_ == held_->round + 1) act(KeepTrainerAnchor{true});
  act(InstallState{});
  held_ = state;
  known_committed_ = std::max(known_committed_, state.round);
  current_at(state.round);
}

bool ParticipantMachine::current_at(std::uint64_t round) {
  become_idle();
  if (trainer_round_ == 0) welcome_trainer();
  // A trainer given an older anchor that has not begun training yet (none
  // attached, or one waiting for its WELCOME) may start from this one
  // instead: the wiring says whether it could (on_trainer_moved()).
  else if (trainer_round_ < round + 1 && !phase_) act(MoveTrainer{round + 1});
  offer_to_waiting();
  if (!final_round_ || round < *final_round_) return false;
  finish();
  return true;
}

void ParticipantMachine::resume_held(const std::string& from) {
  if (transferring_) {  // a transfer of the same round: this site holds it already
    act(DropTransfer{});
    transferring_ = false;
    donors_.clear();
    helpers_asked_ = false;
  }
  note(cat(from, " holds round ", held_->round, " with the same anchor, ", held_->digest,
           ": this site's state is the committed one, and nothing is transferred"));
  known_committed_ = std::max(known_committed_, held_->round);
  current_at(held_->round);
}

void ParticipantMachine::on_trainer_moved(std::uint64_t round) {
  if (holds_current() && round == held_->round + 1 && !phase_) trainer_round_ = round;
}

void ParticipantMachine::on_state_failed(const std::string& why, bool state_lost) {
  if (!transferring_) return;
  std::string from;
  for (const auto& [peer, at] : donors_) from += cat(from.empty() ? "" : " and ", peer);
  note(cat("state transfer", from.empty() ? "" : cat(" from ", from), " abandoned: ", why));
  if (state_lost) held_.reset();  // what the next request says this site holds: nothing
  transferring_ = false;
  donors_.clear();
  helpers_asked_ = false;
}

// ------------------------------------------- a voted round from the round log

void ParticipantMachine::on_restored_vote(const PendingCommit& vote) {
  // Kept until the round's outcome is known or the held state passes it.
  // Not dropped by a PLAN of a later attempt or an ABORT of this one: the
  // site's vote still counts in an election (JobRun reports it), and a
  // successor that never heard of them may complete this attempt. Stepping
  // it is safe whenever a COMMITTED names it: the outcome of a round is one
  // attempt and one digest, and the stepped anchor is checked against it.
  if (vote.round > known_committed_) restored_vote_ = vote;
}

bool ParticipantMachine::commits_restored_vote(const CommittedMessage& c) const {
  return restored_vote_ && held_ && c.round == restored_vote_->round && c.round == held_->round + 1 &&
         (!c.attempt || *c.attempt == restored_vote_->attempt) && c.anchor_digest == restored_vote_->anchor_digest;
}

void ParticipantMachine::apply_logged(const CommittedMessage& c) {
  if (transferring_) {
    // A state of the round before, or of this one from a peer: the round log holds it already.
    act(DropTransfer{});
    transferring_ = false;
    donors_.clear();
    helpers_asked_ = false;
  }
  // The trainer keeps training from the anchor held now (the base of its late Δ).
  if (trainer_round_ == held_->round + 1 && !streaming()) act(KeepTrainerAnchor{false});
  note(cat("round ", c.round, " committed attempt ", restored_vote_->attempt,
           ", which this site voted for before it restarted: stepped from its round log"));
  act(ApplyLoggedRound{c, restored_vote_->attempt});
  logged_round_ = c;
  where_ = Where::applying;
}

void ParticipantMachine::on_logged_applied(const Status& applied, bool state_lost) {
  if (where_ != Where::applying || !logged_round_) return;
  const CommittedMessage c = *logged_round_;
  logged_round_.reset();
  restored_vote_.reset();
  const auto pending = std::exchange(pending_end_, std::nullopt);
  if (!applied.ok()) {
    if (state_lost) held_.reset();
    catch_up(cat("round ", c.round, " cannot be stepped from the round log: ", applied.message()));
    if (pending) end(pending->first, pending->second);  // catching up: no checkpoint
    take_held_messages();
    return;
  }
  held_ = HeldState{c.round, c.anchor_digest};
  if (pending && !(final_round_ && c.round >= *final_round_)) {  // ended while the step ran
    become_idle();
    end(pending->first, pending->second);
    return;
  }
  if (!current_at(c.round) && checkpoint_every_ > 0 && c.round % checkpoint_every_ == 0) act(SaveCheckpoint{});
  take_held_messages();
}

}  // namespace geoloco::daemon
