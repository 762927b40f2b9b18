// STATE_SYNC (DESIGN §4 "Rejoin"): how a (re)joining site gets the outer
// state of the last committed round from a peer, at link speed and checked.
//
//   asker   -> state_request {job}                       (control frame)
//   holder  -> state_offer {round, anchor_digest, values, chunk_values}
//              then ceil(values / chunk_values) `state` frames of anchor
//              values and as many of momentum values, in order, on the
//              same connection (so they arrive in order)
//   asker   checks every frame's place and size, then the anchor's digest
//           against the offer's, and only then replaces its state.
//
// A refused or incomplete transfer leaves the asker's state unchanged.
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/control_messages.h"
#include "transport/frame.h"
#include "transport/mesh.h"

namespace geoloco::daemon {

/// Values per state frame: 1 Mi fp32 = 4 MiB, DESIGN §3's chunk size.
inline constexpr std::uint64_t kStateChunkValues = 1u << 20;

/// Sends `offer` and then the state frames of `anchor` and `momentum` to
/// `peer` (all of it, or an error naming what failed). The state is sent
/// from where it lies, not from a copy (DESIGN §10: no second copy of the
/// model per peer): `unchanged` is asked before each frame, and when it
/// says the state moved on (a round committed), the transfer stops with
/// an error and the peer, whose transfer stays incomplete, asks again.
/// Returns the frame bytes sent (headers included).
asio::awaitable<Result<std::uint64_t>> send_state(transport::Mesh& mesh, const std::string& peer, std::uint64_t job_id,
                                   StateOfferMessage offer, std::span<const float> anchor,
                                   std::span<const float> momentum, std::function<bool()> unchanged);

/// A transfer being received: created from the offer, fed the state frames.
class StateReceiver {
 public:
  /// Errors: invalid_argument (an offer without state, or one too large).
  static Result<StateReceiver> start(const std::string& peer, const StateOfferMessage& offer);

  /// Takes the next state frame. Errors: mismatch (from another peer, out of
  /// order, wrong size, another round), after which the transfer is void.
  Status add(const std::string& peer, const transport::FrameHeader& header, std::span<const std::byte> payload);
  bool complete() const { return next_chunk_ == 2 * chunks_; }
  /// After complete(): checks the anchor's digest. Errors: mismatch.
  Status verify() const;

  const StateOfferMessage& offer() const { return offer_; }
  const std::string& peer() const { return peer_; }
  /// Frame bytes taken so far (headers included).
  std::uint64_t bytes() const { return bytes_; }
  std::vector<float>& anchor() { return anchor_; }
  std::vector<float>& momentum() { return momentum_; }

 private:
  std::string peer_;
  StateOfferMessage offer_;
  std::uint64_t chunks_ = 0;      ///< frames per tensor
  std::uint64_t next_chunk_ = 0;  ///< 0..chunks_-1 anchor, then momentum
  std::uint64_t bytes_ = 0;
  std::vector<float> anchor_;
  std::vector<float> momentum_;
};

}  // namespace geoloco::daemon
