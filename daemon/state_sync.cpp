#include "daemon/state_sync.h"

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <cstring>
#include <memory>
#include <new>

#include "common/digest.h"
#include "transport/async_util.h"

namespace geoloco::daemon {

StateOfferMessage sized_offer(StateOfferMessage offer, std::uint64_t values, std::uint64_t chunk_values) {
  offer.values = values;
  offer.chunk_values = chunk_values;
  return offer;
}

namespace {

// What the slots' senders share (all on the mesh's executor).
struct FramesInFlight {
  explicit FramesInFlight(const asio::any_io_executor& ex) : done(ex) {}
  int senders = 0;
  Status failure;
  std::uint64_t bytes = 0;
  transport::Signal done;
};

// Frames slot, slot + K, slot + 2K, ... on connection `slot`, in order.
// Whether frame i is among the [begin, end) pairs of `wanted` (empty: all are).
bool wanted_frame(const std::vector<std::uint64_t>& wanted, std::uint64_t i) {
  if (wanted.empty()) return true;
  for (std::size_t k = 0; k + 1 < wanted.size(); k += 2)
    if (i >= wanted[k] && i < wanted[k + 1]) return true;
  return false;
}

asio::awaitable<void> send_slot(transport::Mesh& mesh, std::string peer, std::uint64_t job_id, std::uint64_t round,
                                std::span<const float> anchor, std::span<const float> momentum,
                                std::function<bool()> unchanged, std::uint64_t chunk_values, int slot, int slots,
                                std::shared_ptr<FramesInFlight> flight, std::shared_ptr<const std::vector<std::uint64_t>> wanted) {
  const std::uint64_t chunks = (anchor.size() + chunk_values - 1) / chunk_values;
  for (std::uint64_t i = static_cast<std::uint64_t>(slot); i < 2 * chunks && flight->failure.ok(); i += slots) {
    if (!wanted_frame(*wanted, i)) continue;
    const auto& tensor = i < chunks ? anchor : momentum;
    const std::uint64_t begin = (i % chunks) * chunk_values;
    const std::uint64_t size = std::min<std::uint64_t>(chunk_values, tensor.size() - begin);
    transport::FrameHeader f;
    f.type = transport::FrameType::state;
    f.job = job_id;
    f.round = round;
    f.chunk = static_cast<std::uint32_t>(i);
    if (!unchanged()) {
      flight->failure = Status(Err::mismatch, cat("the state moved past round ", round, " during the transfer (frame ",
                                                  i, " of ", 2 * chunks, "); ", peer, " asks again"));
      break;
    }
    Status sent = co_await mesh.send_state_frame(peer, f, std::as_bytes(tensor.subspan(begin, size)), slot);
    if (!sent.ok()) {
      if (flight->failure.ok()) flight->failure = sent;
      break;
    }
    flight->bytes += transport::kFrameHeaderSize + size * sizeof(float);
  }
  if (--flight->senders == 0) flight->done.notify_all();
}

}  // namespace

asio::awaitable<Result<std::uint64_t>> send_state_frames(transport::Mesh& mesh, const std::string& peer,
                                                         std::uint64_t job_id, std::uint64_t round,
                                                         std::span<const float> anchor, std::span<const float> momentum,
                                                         std::function<bool()> unchanged,
                                                         std::uint64_t chunk_values, std::vector<std::uint64_t> wanted) {
  const int slots = mesh.options().transport.connections_per_peer;
  auto flight = std::make_shared<FramesInFlight>(mesh.executor());
  auto frames = std::make_shared<const std::vector<std::uint64_t>>(std::move(wanted));
  flight->senders = slots;
  for (int k = 0; k < slots; ++k)
    asio::co_spawn(mesh.executor(),
                   send_slot(mesh, peer, job_id, round, anchor, momentum, unchanged, chunk_values, k, slots, flight, frames),
                   asio::detached);
  while (flight->senders > 0) co_await flight->done.wait();
  if (!flight->failure.ok()) co_return flight->failure;
  co_return flight->bytes;
}

Result<StateReceiver> StateReceiver::start(const std::string& peer, const StateOfferMessage& offer) {
  GEOLOCO_RETURN_IF(!offer.reason.empty(), Err::invalid_argument, peer, " offers no state: ", offer.reason);
  GEOLOCO_RETURN_IF(offer.values == 0 || offer.chunk_values == 0, Err::invalid_argument, peer,
                    " offers an empty state");
  const std::uint64_t chunks = (offer.values + offer.chunk_values - 1) / offer.chunk_values;
  GEOLOCO_RETURN_IF(2 * chunks > 0xffffffffull, Err::invalid_argument, peer, " offers a state of ", offer.values,
                    " values in too many chunks");
  StateReceiver r;
  r.peer_ = peer;
  r.offer_ = offer;
  r.chunks_ = chunks;
  // Reserved, not sized: each frame sizes its tensor up to its own end, so
  // zeroing the model's memory is spread over the transfer instead of
  // delaying the accept (a third of a second for 64 Mi parameters here).
  try {
    r.anchor_.reserve(offer.values);
    r.momentum_.reserve(offer.values);
    r.have_.assign(2 * chunks, false);
  } catch (const std::bad_alloc&) {
    return GEOLOCO_ERROR(Err::invalid_argument, peer, " offers a state of ", offer.values,
                         " values, more than this site can hold");
  }
  return r;
}

Status StateReceiver::add(const std::string& peer, const transport::FrameHeader& h, std::span<const std::byte> payload) {
  GEOLOCO_RETURN_IF(peer != peer_, Err::mismatch, "state frame from ", peer, " while receiving from ", peer_);
  GEOLOCO_RETURN_IF(complete(), Err::mismatch, "state frame from ", peer, " after the transfer was complete");
  GEOLOCO_RETURN_IF(h.round != offer_.round, Err::mismatch, "state frame of round ", h.round, " from ", peer,
                    ", the offer was for round ", offer_.round);
  GEOLOCO_RETURN_IF(h.chunk >= 2 * chunks_, Err::mismatch, "state frame ", h.chunk, " from ", peer, ": the state has ",
                    2 * chunks_, " frames");
  const std::uint64_t begin = (h.chunk % chunks_) * offer_.chunk_values;
  const std::uint64_t size = std::min<std::uint64_t>(offer_.chunk_values, offer_.values - begin);
  GEOLOCO_RETURN_IF(payload.size() != size * sizeof(float), Err::mismatch, "state frame ", h.chunk, " from ", peer,
                    " holds ", payload.size(), " bytes, expected ", size * sizeof(float));
  if (have_[h.chunk] && resumed_) return {};  // asked for again in a coarse range: the first copy stays
  GEOLOCO_RETURN_IF(have_[h.chunk], Err::mismatch, "state frame ", h.chunk, " from ", peer, " came twice");
  auto& tensor = h.chunk < chunks_ ? anchor_ : momentum_;
  if (tensor.size() < begin + size) tensor.resize(begin + size);  // within the reserved capacity: no reallocation
  std::memcpy(tensor.data() + begin, payload.data(), payload.size());
  have_[h.chunk] = true;
  ++received_;
  bytes_ += transport::kFrameHeaderSize + payload.size();
  return {};
}

bool StateReceiver::continues(const StateOfferMessage& offer) const {
  return offer.reason.empty() && offer.round == offer_.round && offer.anchor_digest == offer_.anchor_digest &&
         offer.values == offer_.values && offer.chunk_values == offer_.chunk_values;
}

void StateReceiver::resume_from(const std::string& peer) {
  peer_ = peer;
  resumed_ = true;
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
  GEOLOCO_RETURN_IF(!complete(), Err::truncated, "the state from ", peer_, " is incomplete");
  const std::string got = digest_hex(digest_f32(anchor_));
  GEOLOCO_RETURN_IF(got != offer_.anchor_digest, Err::mismatch, "the anchor from ", peer_, " has digest ", got,
                    ", the offer said ", offer_.anchor_digest, ": refused");
  return {};
}

}  // namespace geoloco::daemon
