#include "daemon/state_transfers.h"

#include <iomanip>
#include <sstream>

#include "common/digest.h"

namespace geoloco::daemon {

std::string transfer_summary(std::uint64_t bytes, double seconds) {
  std::ostringstream s;
  s << bytes << " bytes in " << std::fixed << std::setprecision(2) << seconds << " s (" << std::setprecision(1)
    << (seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0.0) << " MB/s)";
  return s.str();
}

StateTransfers::StateTransfers(std::string job, std::uint64_t job_id, transport::Mesh& mesh,
                               std::uint64_t chunk_values)
    : job_(std::move(job)), job_id_(job_id), mesh_(mesh), chunk_values_(chunk_values) {}

StateOfferMessage StateTransfers::offer(const std::string& peer, const outer::OuterState& state,
                                        const std::string& reason) {
  StateOfferMessage offer;
  offer.job = job_;
  if (!reason.empty()) {
    offer.reason = reason;
    return offer;
  }
  offer.round = state.round;
  offer.anchor_digest = digest_hex(state.anchor_digest());
  offer.momentum_digest = digest_hex(digest_f32(state.momentum));
  offer.layout = state.layout;
  offered_[peer] = state.round;  // the frames follow the peer's accept
  // A new offer starts afresh (the peer asked again: it may have dropped
  // what came before): a send still going stops, and the frames sent before
  // may be sent again.
  if (auto it = sending_.find(peer); it != sending_.end()) {
    it->second.wants->stop();
    sending_.erase(it);
  }
  return sized_offer(std::move(offer), state.anchor.size(), chunk_values_);
}

std::string StateTransfers::accept(const std::string& from, const StateAcceptMessage& accept,
                                   const outer::OuterState& state) {
  auto offered = offered_.find(from);
  if (offered == offered_.end() || offered->second != accept.round)
    return cat(from, " accepts a state of round ", accept.round, " that this site did not offer it");
  if (state.anchor.empty() || state.round != accept.round) {
    offered_.erase(offered);
    return cat(from, " accepts the state of round ", accept.round, ", but this site moved on to round ", state.round,
               "; it asks again");
  }
  return {};
}

asio::awaitable<Result<std::string>> StateTransfers::send(std::string peer, const outer::OuterState& state,
                                                          std::uint64_t round, std::vector<std::uint64_t> missing) {
  // From the state itself, no copy (docs/design.md §10): a round that
  // commits meanwhile ends the transfer, and the peer asks again.
  const std::span<const float> anchor(state.anchor), momentum(state.momentum);
  auto unchanged = [&state, round, data = anchor.data()] {
    return state.round == round && state.anchor.data() == data;
  };
  const auto started = Clock::now();
  const bool part = !missing.empty();
  const std::uint64_t chunks = (anchor.size() + chunk_values_ - 1) / chunk_values_;
  // Another send of the round to the same peer (its share grew after the
  // first ended) never sends a frame twice: the frames may still be on the
  // wire. A later accept of this round, while this send runs, changes its share.
  std::shared_ptr<FrameWants> wants;
  if (auto it = sending_.find(peer); it != sending_.end() && it->second.round == round && it->second.wants->closed()) {
    wants = it->second.wants;
    wants->reopen(missing);
  } else {
    wants = std::make_shared<FrameWants>(2 * chunks, missing);
    sending_[peer] = {round, wants};
  }
  auto sent = co_await send_state_frames(mesh_, peer, job_id_, round, anchor, momentum, unchanged, chunk_values_, wants);
  wants->close();
  if (!sent.ok()) {
    if (auto it = sending_.find(peer); it != sending_.end() && it->second.wants == wants) sending_.erase(it);
    co_return sent.status();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  co_return cat(part ? "the rest of the state of round " : "state of round ", round, " sent to ", peer, ": ",
                transfer_summary(*sent, seconds));
}

bool StateTransfers::update(const std::string& from, const StateAcceptMessage& accept) {
  auto it = sending_.find(from);
  if (accept.stop) {
    // Let go: whatever it still had to send goes from others. Handled even
    // when nothing is being sent any more.
    if (it != sending_.end() && it->second.round == accept.round) it->second.wants->stop();
    return true;
  }
  if (it == sending_.end() || it->second.round != accept.round) return false;
  return it->second.wants->set(accept.missing);  // false: that send just ended, a new one starts
}

std::vector<AcceptTo> StateTransfers::accepts(const StateReceiver::Shares& shares) const {
  std::vector<AcceptTo> out;
  for (const auto& [peer, ranges] : shares)
    out.push_back({peer, StateAcceptMessage{job_, receiving_->offer().round, ranges}});
  return out;
}

Result<std::vector<AcceptTo>> StateTransfers::receive(const std::string& peer, const StateOfferMessage& offer) {
  // Another state of the same round while holders send this one: refused,
  // the transfer goes on (a holder with other bits must not end it).
  GEOLOCO_RETURN_IF(receiving_ && !receiving_->donors().empty() && offer.round == receiving_->offer().round &&
                        !receiving_->continues(offer),
                    Err::mismatch, peer, " offers another state of round ", offer.round, " (anchor ",
                    offer.anchor_digest, ") than the one arriving (anchor ", receiving_->offer().anchor_digest,
                    "); it does not send a share");
  if (receiving_ && receiving_->continues(offer)) {
    if (receiving_->has_donor(peer)) return std::vector<AcceptTo>{};  // the same offer again
    if (receiving_->donors().empty()) {
      // Every donor stopped: this one goes on with what arrived.
      kept_frames_ = receiving_->frames_taken();
    }
    receiving_->add_donor(peer);
    return accepts(receiving_->share_with(peer));
  }
  receiving_.reset();
  kept_frames_ = 0;
  auto receiver = StateReceiver::start(peer, offer);
  if (!receiver.ok()) return receiver.status();
  receiving_ = std::move(*receiver);
  (void)receiving_->share_all(peer);
  return std::vector<AcceptTo>{{peer, StateAcceptMessage{job_, offer.round}}};  // every frame
}

std::vector<AcceptTo> StateTransfers::release(const std::string& peer, bool hand_out) {
  if (!receiving_ || !receiving_->has_donor(peer)) return {};
  receiving_->remove_donor(peer);
  // It stops (it may only be slow: what it would still send is others' now).
  std::vector<AcceptTo> out{{peer, StateAcceptMessage{job_, receiving_->offer().round, {}, true}}};
  if (hand_out)
    for (auto& a : accepts(receiving_->share_out(peer))) out.push_back(std::move(a));
  return out;
}

StateFrameOutcome StateTransfers::on_frame(const std::string& peer, const transport::FrameHeader& header,
                                           std::span<const std::byte> payload) {
  StateFrameOutcome out;
  // Complete, and waiting to be installed: a frame that two holders both
  // sent (shares change while frames are on the wire) comes too late to matter.
  if (receiving_ && receiving_->complete()) {
    out.kind = StateFrameOutcome::dropped;
    return out;
  }
  if (!receiving_ || !receiving_->was_donor(peer)) {
    // The rest of a transfer this site no longer wants (an answer to an
    // earlier request, or from another peer): dropped, nothing changes.
    // Not refused: the frame is authentic, and closing the connection would
    // cut the heartbeats that share it.
    out.kind = StateFrameOutcome::dropped;
    return out;
  }
  Status added = receiving_->add(peer, header, payload);
  if (added.ok() && receiving_->complete()) added = receiving_->verify();
  if (!added.ok()) {
    // Two transfers from the same peer interleaved, or a broken one: void.
    receiving_.reset();
    out.kind = StateFrameOutcome::failed;
    out.error = added.message();
  } else if (receiving_->complete()) {
    out.kind = StateFrameOutcome::arrived;
    out.round = receiving_->offer().round;
    out.digest = receiving_->offer().anchor_digest;
  } else {
    out.kind = StateFrameOutcome::progress;
    out.share_done = receiving_->take_share_done();
  }
  return out;
}

Result<InstalledState> StateTransfers::install(outer::OuterState& state, const Layout& known, Clock::time_point now) {
  GEOLOCO_RETURN_IF(!receiving_ || !receiving_->complete(), Err::internal, "no complete state transfer to install");
  StateReceiver& received = *receiving_;
  const StateOfferMessage& offer = received.offer();
  if (!offer.layout.empty()) state.layout = offer.layout;  // the offer's parser checked that it adds up
  else if (state.anchor.empty() || layout_values(state.layout) != offer.values)
    state.layout = layout_for(offer.values, known);
  state.job = job_;
  state.anchor = std::move(received.anchor());
  state.momentum = std::move(received.momentum());
  state.round = offer.round;
  InstalledState done;
  done.round = offer.round;
  done.digest = offer.anchor_digest;
  done.peer = received.peer();
  done.senders = received.senders();
  done.bytes = received.bytes();
  done.seconds = std::chrono::duration<double>(now - requested_at_).count();
  done.resumed_frames = kept_frames_;
  // Who sent it: every holder that sent frames of it.
  std::vector<std::string> named = done.senders;
  if (named.empty()) named.push_back(received.peer());
  std::string from;
  for (std::size_t i = 0; i < named.size(); ++i)
    from += cat(i == 0 ? "" : i + 1 == named.size() ? " and " : ", ", named[i]);
  done.note = cat("state of round ", offer.round, " received from ", from,
                  kept_frames_ ? cat(" (", kept_frames_, " of its ", received.frames(),
                                     " frames kept from before the transfer stalled)")
                               : std::string(),
                  ": ", offer.values, " parameters, ", transfer_summary(done.bytes, done.seconds), ", anchor ",
                  offer.anchor_digest);
  receiving_.reset();
  kept_frames_ = 0;
  return done;
}

}  // namespace geoloco::daemon
