#include "daemon/state_sync.h"

#include <cstring>

#include "common/digest.h"

namespace geoloco::daemon {

asio::awaitable<Result<std::uint64_t>> send_state(transport::Mesh& mesh, const std::string& peer, std::uint64_t job_id,
                                   StateOfferMessage offer, std::span<const float> anchor,
                                   std::span<const float> momentum, std::function<bool()> unchanged) {
  offer.values = anchor.size();
  offer.chunk_values = kStateChunkValues;
  const std::string text = encode_control(offer);
  transport::FrameHeader h;
  h.type = transport::FrameType::control;
  h.job = job_id;
  h.round = offer.round;
  Status sent = co_await mesh.send_control_frame(peer, h, std::as_bytes(std::span<const char>(text)));
  if (!sent.ok()) co_return sent;
  std::uint64_t bytes = transport::kFrameHeaderSize + text.size();
  const std::uint64_t chunks = (anchor.size() + kStateChunkValues - 1) / kStateChunkValues;
  for (std::uint64_t i = 0; i < 2 * chunks; ++i) {
    const auto& tensor = i < chunks ? anchor : momentum;
    const std::uint64_t begin = (i % chunks) * kStateChunkValues;
    const std::uint64_t size = std::min<std::uint64_t>(kStateChunkValues, tensor.size() - begin);
    transport::FrameHeader f;
    f.type = transport::FrameType::state;
    f.job = job_id;
    f.round = offer.round;
    f.chunk = static_cast<std::uint32_t>(i);
    if (!unchanged())
      co_return Status(Err::mismatch, cat("the state moved past round ", offer.round, " during the transfer (frame ",
                                         i, " of ", 2 * chunks, "); ", peer, " asks again"));
    sent = co_await mesh.send_control_frame(peer, f, std::as_bytes(tensor.subspan(begin, size)));
    if (!sent.ok()) co_return sent;
    bytes += transport::kFrameHeaderSize + size * sizeof(float);
  }
  co_return bytes;
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
  r.anchor_.resize(offer.values);
  r.momentum_.resize(offer.values);
  return r;
}

Status StateReceiver::add(const std::string& peer, const transport::FrameHeader& h, std::span<const std::byte> payload) {
  GEOLOCO_RETURN_IF(peer != peer_, Err::mismatch, "state frame from ", peer, " while receiving from ", peer_);
  GEOLOCO_RETURN_IF(complete(), Err::mismatch, "state frame from ", peer, " after the transfer was complete");
  GEOLOCO_RETURN_IF(h.round != offer_.round, Err::mismatch, "state frame of round ", h.round, " from ", peer,
                    ", the offer was for round ", offer_.round);
  GEOLOCO_RETURN_IF(h.chunk != next_chunk_, Err::mismatch, "state frame ", h.chunk, " from ", peer, ", expected ",
                    next_chunk_);
  const std::uint64_t begin = (next_chunk_ % chunks_) * offer_.chunk_values;
  const std::uint64_t size = std::min<std::uint64_t>(offer_.chunk_values, offer_.values - begin);
  GEOLOCO_RETURN_IF(payload.size() != size * sizeof(float), Err::mismatch, "state frame ", h.chunk, " from ", peer,
                    " holds ", payload.size(), " bytes, expected ", size * sizeof(float));
  auto& tensor = next_chunk_ < chunks_ ? anchor_ : momentum_;
  std::memcpy(tensor.data() + begin, payload.data(), payload.size());
  ++next_chunk_;
  bytes_ += transport::kFrameHeaderSize + payload.size();
  return {};
}

Status StateReceiver::verify() const {
  GEOLOCO_RETURN_IF(!complete(), Err::truncated, "the state from ", peer_, " is incomplete");
  const std::string got = digest_hex(digest_f32(anchor_));
  GEOLOCO_RETURN_IF(got != offer_.anchor_digest, Err::mismatch, "the anchor from ", peer_, " has digest ", got,
                    ", the offer said ", offer_.anchor_digest, ": refused");
  return {};
}

}  // namespace geoloco::daemon
