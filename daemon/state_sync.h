// STATE_SYNC (docs/design.md §4 "Rejoin"): how a (re)joining site gets the outer
// state of the last committed round from a peer, at link speed and checked.
//
//   asker   -> state_request {job}                       (control frame)
//   holder  -> state_offer {round, anchor_digest, values, chunk_values}
//   asker   -> state_accept {job, round}                 (ready for frames)
//   holder  -> ceil(values / chunk_values) `state` frames of anchor values
//              and as many of momentum values, frame i on connection slot
//              i mod connections_per_peer: several TCP streams, as a long
//              fat link needs, in any order across slots
//   asker   checks every frame's place (once each) and size, then the
//           anchor's digest against the offer's, and only then replaces
//           its state.
//
// The accept keeps frames from overtaking the offer on another connection.
// A refused or incomplete transfer leaves the asker's state unchanged. When
// the donor stops mid-transfer, another holder's offer of the same state
// takes over: the accept names the frames still missing (`missing`), and
// only those are sent.
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

/// Values per state frame: 1 Mi fp32 = 4 MiB, so a long fat link is kept busy with few frames.
inline constexpr std::uint64_t kStateChunkValues = 1u << 20;

/// `offer` with its size fields filled for a state of `values` parameters
/// sent `chunk_values` to a frame.
StateOfferMessage sized_offer(StateOfferMessage offer, std::uint64_t values,
                              std::uint64_t chunk_values = kStateChunkValues);

/// After the peer's state_accept: sends the state frames of `round`'s
/// `anchor` and `momentum`, `chunk_values` to a frame, to `peer` over all of the pair's connections
/// (all of it, or an error naming what failed). The state is sent from where
/// it lies, not from a copy (docs/design.md §10: no second copy of the model per
/// peer): `unchanged` is asked before each frame, and when it says the state
/// moved on (a round committed), the transfer stops with an error and the
/// peer, whose transfer stays incomplete, asks again. `wanted`: the frames
/// to send, as [begin, end) pairs of frame indices (a resumed transfer);
/// empty, all of them. Returns the frame bytes sent (headers included).
asio::awaitable<Result<std::uint64_t>> send_state_frames(transport::Mesh& mesh, const std::string& peer,
                                                         std::uint64_t job_id, std::uint64_t round,
                                                         std::span<const float> anchor, std::span<const float> momentum,
                                                         std::function<bool()> unchanged,
                                                         std::uint64_t chunk_values = kStateChunkValues,
                                                         std::vector<std::uint64_t> wanted = {});

/// A transfer being received: created from the offer, fed the state frames.
class StateReceiver {
 public:
  /// Errors: invalid_argument (an offer without state, or one too large).
  static Result<StateReceiver> start(const std::string& peer, const StateOfferMessage& offer);

  /// Takes a state frame, in any order. Errors: mismatch (from another
  /// peer, a place outside the state or already filled, wrong size, another
  /// round), after which the transfer is void.
  Status add(const std::string& peer, const transport::FrameHeader& header, std::span<const std::byte> payload);
  bool complete() const { return received_ == 2 * chunks_; }
  /// After complete(): checks the anchor's digest. Errors: mismatch.
  Status verify() const;
  /// Whether `offer` is of the same state (round, digest, size, framing):
  /// then a transfer broken off by its donor can go on from that peer.
  bool continues(const StateOfferMessage& offer) const;
  /// Goes on receiving from `peer`, keeping every frame taken so far.
  void resume_from(const std::string& peer);
  /// The frames not taken yet, as [begin, end) pairs: at most `max_ranges`,
  /// the last one then reaching to the end (a frame taken already that
  /// comes again in a resumed transfer is ignored, not refused).
  std::vector<std::uint64_t> missing(std::size_t max_ranges = 2048) const;
  std::uint64_t frames_taken() const { return received_; }
  std::uint64_t frames() const { return 2 * chunks_; }

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
  std::vector<bool> have_;        ///< per frame: 0..chunks_-1 anchor, then momentum
  std::uint64_t received_ = 0;
  std::uint64_t bytes_ = 0;
  bool resumed_ = false;          ///< from a second donor: a frame taken already may come again
  std::vector<float> anchor_;
  std::vector<float> momentum_;
};

}  // namespace geoloco::daemon
