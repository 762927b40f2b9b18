#include "daemon/state_transfers.h"

#include <iomanip>
#include <sstream>

#include "common/digest.h"
#include "daemon/round_replay.h"

namespace geoloco::daemon {

std::string transfer_summary(std::uint64_t bytes, double seconds) {
  std::ostringstream s;
  s << bytes << " bytes in " << std::fixed << std::setprecision(2) << seconds << " s (" << std::setprecision(1)
    << (seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0.0) << " MB/s)";
  return s.str();
}

std::string offer_route(const StateOfferMessage& offer) {
  const std::uint64_t base = offer_base_round(offer);
  if (offer.deltas.empty()) return {};
  const std::string rounds =
      base + 1 == offer.round ? cat("round ", offer.round) : cat("rounds ", base + 1, "..", offer.round);
  if (offer.from_held) return cat(" (as ", rounds, " of the round log, on round ", base, ")");
  return cat(" (as the state of round ", base, " and ", rounds, " of the round log)");
}

StateTransfers::StateTransfers(std::string job, std::uint64_t job_id, transport::Mesh& mesh, std::uint64_t chunk_values)
    : job_(std::move(job)), job_id_(job_id), mesh_(mesh), chunk_values_(chunk_values) {}

StateOfferMessage StateTransfers::offer(const std::string& peer, std::shared_ptr<const StateSource> source,
                                        const std::string& reason) {
  StateOfferMessage offer;
  offer.job = job_;
  if (!reason.empty() || !source) {
    offer.reason = reason.empty() ? std::string("no state to offer") : reason;
    offered_.erase(peer);  // what was offered before is not any more
    return offer;
  }
  offer = source->offer(job_, chunk_values_);
  offered_[peer] = {offer.round, std::move(source), offer};  // the frames follow the peer's accept
  // A new offer starts afresh (the peer asked again: it may have dropped
  // what came before): a send still going stops, and the frames sent before
  // may be sent again.
  if (auto it = sending_.find(peer); it != sending_.end()) {
    it->second.wants->stop();
    sending_.erase(it);
  }
  return offer;
}

std::string StateTransfers::accept(const std::string& from, const StateAcceptMessage& accept) {
  auto offered = offered_.find(from);
  if (offered == offered_.end() || offered->second.round != accept.round)
    return cat(from, " accepts a state of round ", accept.round, " that this site did not offer it");
  return {};
}

asio::awaitable<Result<std::string>> StateTransfers::send(std::string peer, std::uint64_t round,
                                                          std::vector<std::uint64_t> missing) {
  auto offered = offered_.find(peer);
  if (offered == offered_.end() || offered->second.round != round)
    co_return Status(Err::internal, cat("no state of round ", round, " was offered to ", peer));
  // What was offered, unchanged however many rounds commit meanwhile
  // (state_source.h): kept alive by this send.
  const std::shared_ptr<const StateSource> source = offered->second.source;
  const StateOfferMessage offer = offered->second.offer;
  const std::uint64_t frames = offer_frames(offer).total;
  const auto started = Clock::now();
  const bool part = !missing.empty();
  // Another send of the round to the same peer (its share grew after the
  // first ended) never sends a frame twice: the frames may still be on the
  // wire. A later accept of this round, while this send runs, changes its share.
  std::shared_ptr<FrameWants> wants;
  if (auto it = sending_.find(peer); it != sending_.end() && it->second.round == round && it->second.wants->closed()) {
    wants = it->second.wants;
    wants->reopen(missing);
  } else {
    wants = std::make_shared<FrameWants>(frames, missing);
    sending_[peer] = {round, wants};
  }
  // Named, not a temporary of the co_await's expression (GCC 12 destroys those twice).
  FrameBytes frame = [source, offer](std::uint64_t i, Buffer& scratch) { return source->frame(offer, i, scratch); };
  auto sent = co_await send_state_frames(mesh_, peer, job_id_, round, frames, std::move(frame), wants);
  wants->close();
  if (!sent.ok()) {
    if (auto it = sending_.find(peer); it != sending_.end() && it->second.wants == wants) sending_.erase(it);
    co_return sent.status();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  std::string line = part ? "the rest of the state of round " : "state of round ";
  line += cat(round, " sent to ", peer, ": ", transfer_summary(*sent, seconds), offer_route(offer));
  co_return line;
}

void StateTransfers::forget_offers_before(std::uint64_t round) {
  std::erase_if(offered_, [round](const auto& o) { return o.second.round < round; });
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

Result<std::vector<AcceptTo>> StateTransfers::receive(const std::string& peer, const StateOfferMessage& offer,
                                                      std::size_t holders) {
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
  GEOLOCO_RETURN_IF(!offer.deltas.empty() && !steps_, Err::invalid_argument, peer, " offers rounds ",
                    offer_base_round(offer) + 1, "..", offer.round,
                    " as round-log entries, which this site cannot step");
  receiving_.reset();
  stepped_.clear();
  kept_frames_ = 0;
  auto receiver = StateReceiver::start(peer, offer);
  if (!receiver.ok()) return receiver.status();
  receiving_ = std::move(*receiver);
  if (holders <= 1) {
    (void)receiving_->share_all(peer);
    return std::vector<AcceptTo>{{peer, StateAcceptMessage{job_, offer.round}}};  // every frame
  }
  return accepts(receiving_->share_first(peer, holders));
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
                                           std::span<const std::byte> payload, OwnState own) {
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
  if (header.round != receiving_->offer().round) {
    // The rest of this holder's answer to an earlier offer, still on the
    // wire when the transfer moved to a later round: late, not wrong.
    out.kind = StateFrameOutcome::dropped;
    return out;
  }
  Status added = receiving_->add(peer, header, payload);
  if (added.ok() && receiving_->complete()) added = receiving_->verify();
  bool lost = false;
  if (added.ok() && receiving_->complete() && !receiving_->offer().deltas.empty()) added = step_entries(own, lost);
  if (!added.ok()) {
    // Two transfers from the same peer interleaved, or a broken one: void.
    receiving_.reset();
    out.kind = StateFrameOutcome::failed;
    out.error = added.message();
    out.state_lost = lost;
  } else if (receiving_->complete()) {
    out.kind = StateFrameOutcome::arrived;
    out.round = receiving_->offer().round;
    out.digest = receiving_->offer().anchor_digest;
  } else {
    out.kind = StateFrameOutcome::progress;
    out.share_done = receiving_->take_share_done();
    // A share is in, and frames nobody was asked for remain (a holder
    // expected to help did not offer): the holders sending take them.
    if (!out.share_done.empty() && receiving_->unowned() > 0) out.accepts = accepts(receiving_->share_out(""));
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
  GEOLOCO_RETURN_IF(stepped_in_place_ && stepped_in_place_ != &state, Err::internal,
                    "the rounds of the transfer were stepped on another state than the one it is installed in");
  state.job = job_;
  if (!stepped_in_place_) {
    state.anchor = std::move(received.anchor());
    state.momentum = std::move(received.momentum());
  }
  const bool in_place = stepped_in_place_ != nullptr;
  stepped_in_place_ = nullptr;
  state.round = offer.round;
  InstalledState done;
  done.base_round = offer_base_round(offer);
  done.rounds_stepped = offer.deltas.size();
  done.round = offer.round;
  done.digest = offer.anchor_digest;
  done.peer = received.peer();
  done.senders = received.senders();
  done.bytes = received.bytes();
  done.seconds = std::chrono::duration<double>(now - requested_at_).count();
  done.resumed_frames = kept_frames_;
  done.entries = std::move(stepped_);
  stepped_.clear();
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
                  offer.anchor_digest, offer_route(offer), in_place ? ", stepped where this site's state lies" : "");
  receiving_.reset();
  kept_frames_ = 0;
  return done;
}

Status StateTransfers::step_entries(OwnState own, bool& lost) {
  StateReceiver& r = *receiving_;
  const StateOfferMessage& offer = r.offer();
  const std::uint64_t base = offer_base_round(offer);
  const outer::OuterState* held = own.state;
  lost = false;
  stepped_.clear();
  stepped_in_place_ = nullptr;
  if (offer.from_held) {
    // This site's own state is the base: it must still be the one it said it held.
    GEOLOCO_RETURN_IF(!held || held->round != base || held->anchor.size() != offer.values, Err::mismatch,
                      "the rounds from ", r.peer(), " start at round ", base, ", this site holds round ",
                      held ? held->round : 0, " now");
    const std::string digest = digest_hex(held->anchor_digest());
    GEOLOCO_RETURN_IF(digest != offer.base_digest, Err::mismatch, "the rounds from ", r.peer(), " start at round ",
                      base, "'s anchor ", offer.base_digest, ", this site's is ", digest);
  }
  // Every entry is checked against the offer before anything is stepped:
  // a damaged or unoffered one leaves this site's own state as it was.
  std::vector<RoundDelta> entries;
  for (std::size_t i = 0; i < offer.deltas.size(); ++i) {
    const StateDeltaOffer& d = offer.deltas[i];
    const auto& bytes = r.deltas()[i];
    GEOLOCO_RETURN_IF(bytes.size() < 16 ||
                          std::string_view(reinterpret_cast<const char*>(bytes.data()), 16) != std::string_view(d.hash),
                      Err::mismatch, "round ", d.round, "'s Δ from ", r.peer(), " is not the entry offered (hash ",
                      d.hash, ")");
    auto entry = parse_round_delta(bytes, d.round, steps_->config_hash, cat("round ", d.round, "'s Δ from ", r.peer()));
    if (!entry.ok()) return entry.status();
    entries.push_back(std::move(*entry));
  }
  const bool in_place = offer.from_held && own.in_place;
  outer::OuterState work;
  if (!offer.from_held) {
    work.anchor = std::move(r.anchor());
    work.momentum = std::move(r.momentum());
  } else if (!in_place) {
    work.anchor = held->anchor;
    work.momentum = held->momentum;
  }
  outer::OuterState& state = in_place ? *own.state : work;
  if (in_place && own.before_step) own.before_step();
  Status out;
  for (std::size_t i = 0; i < entries.size() && out.ok(); ++i) {
    const StateDeltaOffer& d = offer.deltas[i];
    auto digest = step_round_delta(state, entries[i], steps_->pipeline, steps_->outer, steps_->threads);
    if (!digest.ok()) out = digest.status();
    else if (*digest != d.digest)
      out = Status(Err::mismatch, cat("round ", d.round, " from ", r.peer(), "'s round log gives anchor ", *digest,
                                      ", the committed one is ", d.digest));
    // A step that failed before changing anything (the first entry did not
    // fit or decode) leaves the state as it was; any other has changed it.
    if (!out.ok()) lost = in_place && (i > 0 || out.code() == Err::mismatch);
  }
  if (!out.ok()) return out;
  if (offer.from_held) stepped_ = std::move(entries);
  if (in_place) {
    stepped_in_place_ = own.state;
  } else {
    // The stepped state replaces the frames'.
    r.anchor() = std::move(work.anchor);
    r.momentum() = std::move(work.momentum);
  }
  return out;
}

}  // namespace geoloco::daemon
