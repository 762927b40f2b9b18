#include "daemon/state_sync.h"

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "common/digest.h"
#include "common/async_util.h"

namespace geoloco::daemon {

StateOfferMessage sized_offer(StateOfferMessage offer, std::uint64_t values, std::uint64_t chunk_values) {
  offer.values = values;
  offer.chunk_values = chunk_values;
  return offer;
}

namespace {

// What the slots' senders share (all on the mesh's executor).
struct FramesInFlight {
  explicit FramesInFlight(const asio::any_io_executor& ex) : done(ex), changed(ex) {}
  int senders = 0;  // connections still in the send
  int idle = 0;     // of those, how many found nothing to send and wait for a change of share
  bool over = false;
  Status failure;
  std::uint64_t bytes = 0;
  Signal done;
  Signal changed;
};

// The share's frames, the next one whenever connection `slot` is free.
asio::awaitable<void> send_slot(transport::Mesh& mesh, std::string peer, std::uint64_t job_id, std::uint64_t round,
                                FrameBytes frame, int slot, std::shared_ptr<FramesInFlight> flight,
                                std::shared_ptr<FrameWants> wants) {
  Buffer scratch;  // a frame read from a file; in flight until the send returns
  while (flight->failure.ok() && !flight->over) {
    const auto next = wants->next();
    if (!next) {
      // Nothing for this connection now. The send ends when every
      // connection is in this state; until then a change of share (another
      // holder stopped, its frames come here) wakes them all again.
      if (++flight->idle == flight->senders) {
        flight->over = true;
        wants->close();
        flight->changed.notify_all();
        break;
      }
      co_await flight->changed.wait();
      --flight->idle;
      continue;
    }
    const std::uint64_t i = *next;
    transport::FrameHeader f;
    f.type = transport::FrameType::state;
    f.job = job_id;
    f.round = round;
    f.chunk = static_cast<std::uint32_t>(i);
    auto payload = frame(i, scratch);
    if (!payload.ok()) {
      flight->failure = payload.status();
      break;
    }
    Status sent = co_await mesh.send_state_frame(peer, f, *payload, slot);
    if (!sent.ok()) {
      if (flight->failure.ok()) flight->failure = sent;
      break;
    }
    flight->bytes += transport::kFrameHeaderSize + payload->size();
  }
  if (!flight->failure.ok() && !flight->over) {
    flight->over = true;  // a failure ends the send on every connection
    wants->close();
    flight->changed.notify_all();
  }
  if (--flight->senders == 0) flight->done.notify_all();
}

}  // namespace

FrameWants::FrameWants(std::uint64_t frames, const std::vector<std::uint64_t>& ranges)
    : wanted_(frames, false), sent_(frames, false) {
  (void)set(ranges);
}

bool FrameWants::set(const std::vector<std::uint64_t>& ranges) {
  if (closed_) return false;
  if (ranges.empty()) {
    wanted_.assign(wanted_.size(), true);
  } else {
    wanted_.assign(wanted_.size(), false);
    for (std::size_t k = 0; k + 1 < ranges.size(); k += 2)
      for (std::uint64_t i = ranges[k]; i < std::min<std::uint64_t>(ranges[k + 1], wanted_.size()); ++i)
        wanted_[i] = true;
  }
  cursor_ = 0;  // a frame added behind the search is found again
  if (on_change) on_change();
  return true;
}

void FrameWants::stop() {
  wanted_.assign(wanted_.size(), false);
  if (on_change) on_change();
}

std::optional<std::uint64_t> FrameWants::next() {
  for (; cursor_ < wanted_.size(); ++cursor_) {
    if (wanted_[cursor_] && !sent_[cursor_]) {
      sent_[cursor_] = true;
      return cursor_++;
    }
  }
  return std::nullopt;
}

asio::awaitable<Result<std::uint64_t>> send_state_frames(transport::Mesh& mesh, const std::string& peer,
                                                         std::uint64_t job_id, std::uint64_t round,
                                                         std::uint64_t frames, FrameBytes frame,
                                                         std::shared_ptr<FrameWants> wants) {
  const int slots = mesh.options().transport.connections_per_peer;
  auto flight = std::make_shared<FramesInFlight>(mesh.executor());
  if (!wants) wants = std::make_shared<FrameWants>(frames, std::vector<std::uint64_t>{});
  wants->on_change = [flight] { flight->changed.notify_all(); };
  flight->senders = slots;
  for (int k = 0; k < slots; ++k)
    asio::co_spawn(mesh.executor(), send_slot(mesh, peer, job_id, round, frame, k, flight, wants), asio::detached);
  while (flight->senders > 0) co_await flight->done.wait();
  if (!flight->failure.ok()) co_return flight->failure;
  co_return flight->bytes;
}

OfferFrames offer_frames(const StateOfferMessage& offer) {
  OfferFrames f;
  if (offer.chunk_values == 0) return f;
  f.chunk_values = offer.chunk_values;
  f.chunks = offer.from_held ? 0 : (offer.values + offer.chunk_values - 1) / offer.chunk_values;
  f.total = 2 * f.chunks;
  for (const auto& d : offer.deltas) {
    f.first.push_back(f.total);
    f.total += (d.bytes + f.chunk_bytes() - 1) / f.chunk_bytes();
  }
  return f;
}

std::optional<OfferFrames::Place> OfferFrames::place(std::uint64_t frame, const StateOfferMessage& offer) const {
  if (frame >= total) return std::nullopt;
  Place p;
  if (frame < 2 * chunks) {
    p.entry = -1;
    p.tensor = frame < chunks ? 0 : 1;
    p.begin = (frame % chunks) * chunk_values * sizeof(float);
    p.size = std::min<std::uint64_t>(chunk_values, offer.values - (frame % chunks) * chunk_values) * sizeof(float);
    return p;
  }
  const auto it = std::upper_bound(first.begin(), first.end(), frame);
  p.entry = static_cast<int>(it - first.begin()) - 1;
  p.begin = (frame - first[static_cast<std::size_t>(p.entry)]) * chunk_bytes();
  p.size = std::min<std::uint64_t>(chunk_bytes(), offer.deltas[static_cast<std::size_t>(p.entry)].bytes - p.begin);
  return p;
}

Result<StateReceiver> StateReceiver::start(const std::string& peer, const StateOfferMessage& offer) {
  GEOLOCO_RETURN_IF(!offer.reason.empty(), Err::invalid_argument, peer, " offers no state: ", offer.reason);
  GEOLOCO_RETURN_IF(offer.values == 0 || offer.chunk_values == 0, Err::invalid_argument, peer,
                    " offers an empty state");
  // What a holder sends is never more than the state and as much again in
  // entries (state_source.h): more is refused before anything is allocated.
  std::uint64_t entry_bytes = 0;
  for (const auto& d : offer.deltas) entry_bytes += d.bytes;  // each at most 2^40, at most 4096 of them
  GEOLOCO_RETURN_IF(entry_bytes > 2 * offer.values * sizeof(float) * 2, Err::invalid_argument, peer, " offers ",
                    entry_bytes, " bytes of round-log entries for a state of ", offer.values,
                    " values: more than twice the state");
  StateReceiver r;
  r.frames_ = offer_frames(offer);
  GEOLOCO_RETURN_IF(r.frames_.total > 0xffffffffull, Err::invalid_argument, peer, " offers a state of ", offer.values,
                    " values in too many frames");
  r.first_ = peer;
  r.donors_ = {peer};
  r.ever_ = {peer};
  r.offer_ = offer;
  // Reserved, not sized: each frame sizes its tensor up to its own end, so
  // zeroing the model's memory is spread over the transfer instead of
  // delaying the accept (a third of a second for 64 Mi parameters here).
  try {
    if (!offer.from_held) {
      r.anchor_.reserve(offer.values);
      r.momentum_.reserve(offer.values);
    }
    for (const auto& d : offer.deltas) r.deltas_.emplace_back(d.bytes);
    r.have_.assign(r.frames_.total, false);
    r.owner_.assign(r.frames_.total, std::string());
  } catch (const std::bad_alloc&) {
    return GEOLOCO_ERROR(Err::invalid_argument, peer, " offers a state of ", offer.values,
                         " values, more than this site can hold");
  }
  return r;
}

Status StateReceiver::add(const std::string& peer, const transport::FrameHeader& h,
                          std::span<const std::byte> payload) {
  GEOLOCO_RETURN_IF(!was_donor(peer), Err::mismatch, "state frame from ", peer, ", which is not sending this state");
  GEOLOCO_RETURN_IF(complete(), Err::mismatch, "state frame from ", peer, " after the transfer was complete");
  GEOLOCO_RETURN_IF(h.round != offer_.round, Err::mismatch, "state frame of round ", h.round, " from ", peer,
                    ", the offer was for round ", offer_.round);
  const auto place = frames_.place(h.chunk, offer_);
  GEOLOCO_RETURN_IF(!place, Err::mismatch, "state frame ", h.chunk, " from ", peer, ": the state has ", frames_.total,
                    " frames");
  GEOLOCO_RETURN_IF(payload.size() != place->size, Err::mismatch, "state frame ", h.chunk, " from ", peer, " holds ",
                    payload.size(), " bytes, expected ", place->size);
  if (have_[h.chunk] && shared_) return {};  // sent by two donors while shares changed: the first copy stays
  GEOLOCO_RETURN_IF(have_[h.chunk], Err::mismatch, "state frame ", h.chunk, " from ", peer, " came twice");
  if (place->entry < 0) {
    auto& tensor = place->tensor == 0 ? anchor_ : momentum_;
    const std::uint64_t end = (place->begin + place->size) / sizeof(float);
    if (tensor.size() < end) tensor.resize(end);  // within the reserved capacity: no reallocation
    std::memcpy(reinterpret_cast<std::byte*>(tensor.data()) + place->begin, payload.data(), payload.size());
  } else {
    std::memcpy(deltas_[static_cast<std::size_t>(place->entry)].data() + place->begin, payload.data(), payload.size());
  }
  have_[h.chunk] = true;
  if (std::find(senders_.begin(), senders_.end(), peer) == senders_.end()) senders_.push_back(peer);
  if (const std::string& owner = owner_[h.chunk]; !owner.empty())
    if (auto it = outstanding_.find(owner); it != outstanding_.end() && it->second > 0 && --it->second == 0)
      share_done_.push_back(owner);
  ++received_;
  bytes_ += transport::kFrameHeaderSize + payload.size();
  return {};
}

bool StateReceiver::continues(const StateOfferMessage& offer) const {
  return offer.reason.empty() && offer.round == offer_.round && offer.anchor_digest == offer_.anchor_digest &&
         offer.momentum_digest == offer_.momentum_digest && offer.values == offer_.values &&
         offer.chunk_values == offer_.chunk_values && offer.base_round == offer_.base_round &&
         offer.base_digest == offer_.base_digest && offer.from_held == offer_.from_held &&
         offer.deltas == offer_.deltas;
}

void StateReceiver::add_donor(const std::string& peer) {
  if (!has_donor(peer)) donors_.push_back(peer);
  ever_.insert(peer);
  shared_ = true;
}

void StateReceiver::remove_donor(const std::string& peer) {
  donors_.erase(std::remove(donors_.begin(), donors_.end(), peer), donors_.end());
}

namespace {
// The frames of `frames` (sorted) as [begin, end) pairs, at most `max_ranges`
// (past that, the last pair reaches to the last frame: coarser, frames in
// between asked again and ignored when they come twice).
std::vector<std::uint64_t> as_ranges(const std::vector<std::uint64_t>& frames, std::size_t max_ranges) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t i : frames) {
    if (!out.empty() && out.back() == i) out.back() = i + 1;
    else if (out.size() / 2 + 1 > std::max<std::size_t>(max_ranges, 1)) out.back() = i + 1;
    else out.insert(out.end(), {i, i + 1});
  }
  return out;
}
}  // namespace

std::vector<std::uint64_t> StateReceiver::share_of(const std::string& peer) const {
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < have_.size(); ++i)
    if (!have_[i] && owner_[i] == peer) out.push_back(i);
  return out;
}

void StateReceiver::count_shares() {
  outstanding_.clear();
  for (std::uint64_t i = 0; i < have_.size(); ++i)
    if (!have_[i] && !owner_[i].empty()) ++outstanding_[owner_[i]];
  // A donor left with nothing to send is done (its frames are in, or the
  // change of shares gave it none).
  for (const auto& d : donors_)
    if (!outstanding_.count(d)) share_done_.push_back(d);
}

StateReceiver::Shares StateReceiver::share_all(const std::string& peer, std::size_t max_ranges) {
  for (std::uint64_t i = 0; i < have_.size(); ++i)
    if (!have_[i]) owner_[i] = peer;
  count_shares();
  return {{peer, as_ranges(share_of(peer), max_ranges)}};
}

StateReceiver::Shares StateReceiver::share_first(const std::string& peer, std::size_t holders, std::size_t max_ranges) {
  std::uint64_t left = 0;
  for (std::uint64_t i = 0; i < have_.size(); ++i) left += have_[i] ? 0 : 1;
  const std::uint64_t part = (left + holders - 1) / std::max<std::size_t>(holders, 1);
  std::uint64_t given = 0;
  for (std::uint64_t i = 0; i < have_.size(); ++i)
    if (!have_[i]) owner_[i] = given++ < part ? peer : std::string();
  count_shares();
  return {{peer, as_ranges(share_of(peer), max_ranges)}};
}

std::uint64_t StateReceiver::unowned() const {
  std::uint64_t n = 0;
  for (std::uint64_t i = 0; i < have_.size(); ++i)
    if (!have_[i] && (owner_[i].empty() || !has_donor(owner_[i]))) ++n;
  return n;
}

StateReceiver::Shares StateReceiver::share_with(const std::string& joining, std::size_t max_ranges) {
  // Frames nobody is asked for (their donor stopped) go to the newcomer.
  for (std::uint64_t i = 0; i < have_.size(); ++i)
    if (!have_[i] && (owner_[i].empty() || !has_donor(owner_[i]))) owner_[i] = joining;
  // Then every share above an equal part gives its upper frames (the ones
  // its owner reaches last) until it is down to that part.
  std::uint64_t left = 0;
  for (std::uint64_t i = 0; i < have_.size(); ++i) left += have_[i] ? 0 : 1;
  const std::uint64_t part = (left + donors_.size() - 1) / donors_.size();
  Shares out;
  for (const auto& d : donors_) {
    if (d == joining) continue;
    const auto frames = share_of(d);
    if (frames.size() <= part) continue;
    for (std::size_t k = part; k < frames.size(); ++k) owner_[frames[k]] = joining;
    out.emplace_back(d, as_ranges(share_of(d), max_ranges));
  }
  count_shares();
  if (auto mine = share_of(joining); !mine.empty()) out.emplace_back(joining, as_ranges(mine, max_ranges));
  return out;
}

StateReceiver::Shares StateReceiver::share_out(const std::string& stopped, std::size_t max_ranges) {
  const auto orphans = share_of(stopped);
  Shares out;
  if (donors_.empty()) return out;
  for (std::size_t k = 0; k < orphans.size(); ++k) owner_[orphans[k]] = donors_[k * donors_.size() / orphans.size()];
  count_shares();
  for (const auto& d : donors_)
    if (auto mine = share_of(d); !mine.empty() && !orphans.empty()) out.emplace_back(d, as_ranges(mine, max_ranges));
  return out;
}

std::vector<std::string> StateReceiver::take_share_done() { return std::exchange(share_done_, {}); }

bool StateReceiver::has_donor(const std::string& peer) const {
  return std::find(donors_.begin(), donors_.end(), peer) != donors_.end();
}

std::vector<std::uint64_t> StateReceiver::missing(std::size_t max_ranges) const {
  max_ranges = std::max<std::size_t>(max_ranges, 1);
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < have_.size(); ++i) {
    if (have_[i]) continue;
    if (!out.empty() && out.back() == i) {
      out.back() = i + 1;  // extends the last range
    } else if (out.size() / 2 + 1 > max_ranges) {
      out.back() = have_.size();  // too many ranges: the last reaches to the end
      break;
    } else {
      out.push_back(i);
      out.push_back(i + 1);
    }
  }
  return out;
}

Status StateReceiver::verify() const {
  GEOLOCO_RETURN_IF(!complete(), Err::truncated, "the state from ", first_, " is incomplete");
  if (offer_.from_held) return {};  // no state frames: the base is this site's own
  const std::string got = digest_hex(digest_f32(anchor_));
  GEOLOCO_RETURN_IF(got != offer_base_digest(offer_), Err::mismatch, "the anchor from ", first_, " has digest ", got,
                    ", the offer said ", offer_base_digest(offer_), ": refused");
  if (!offer_.momentum_digest.empty()) {
    const std::string m = digest_hex(digest_f32(momentum_));
    GEOLOCO_RETURN_IF(m != offer_.momentum_digest, Err::mismatch, "the momentum from ", first_, " has digest ", m,
                      ", the offer said ", offer_.momentum_digest, ": refused");
  }
  return {};
}

}  // namespace geoloco::daemon
