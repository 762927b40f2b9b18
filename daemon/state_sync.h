// STATE_SYNC (docs/design.md §4 "Rejoin"): how a (re)joining site gets the outer
// state of the last committed round from a peer, at link speed and checked.
//
//   asker   -> state_request {job}                       (control frame)
//   holder  -> state_offer {round, anchor_digest, values, chunk_values}
//   asker   -> state_accept {job, round}                 (ready for frames)
//   holder  -> ceil(values / chunk_values) `state` frames of anchor values
//              and as many of momentum values, over every data connection
//              of the pair at once (each takes the next frame when it is
//              free): several TCP streams, as a long fat link needs, in any
//              order across connections
//   asker   checks every frame's place (once each) and size, then the
//           anchor's digest against the offer's, and only then replaces
//           its state.
//
// The accept keeps frames from overtaking the offer on another connection.
// A refused or incomplete transfer leaves the asker's state unchanged. When
// the donor stops mid-transfer, another holder's offer of the same state
// takes over: the accept names the frames still missing (`missing`), and
// only those are sent. Several holders can send one transfer at once: each
// is accepted for its share of the missing frames, and a later accept to a
// holder that is sending changes its share (narrowed when another holder
// joins, widened when one stops); the asker takes each frame once.
#pragma once

#include <asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "daemon/control_messages.h"
#include "transport/frame.h"
#include "transport/mesh.h"

namespace geoloco::daemon {

/// Values per state frame: 256 Ki fp32 = 1 MiB, as the all-reduce's chunks.
/// A joining site judges a holder stalled by the time between its frames:
/// 1 MiB frames arrive every 2 s even over a 1 MB/s link shared by two
/// connections (4 MiB ones took 8 s there, and holders were let go that
/// only were slow); and 1 MiB is still few frames for a long fat link.
inline constexpr std::uint64_t kStateChunkValues = 1u << 18;

/// `offer` with its size fields filled for a state of `values` parameters
/// sent `chunk_values` to a frame.
StateOfferMessage sized_offer(StateOfferMessage offer, std::uint64_t values,
                              std::uint64_t chunk_values = kStateChunkValues);

/// The frames a holder sends one peer: the accept's share, changeable while
/// the frames go out (a later accept), each sent at most once, lowest
/// first, by whichever connection is free. Used on the mesh's executor only.
class FrameWants {
 public:
  /// `ranges`: [begin, end) pairs of frame indices; empty: every frame.
  FrameWants(std::uint64_t frames, const std::vector<std::uint64_t>& ranges);
  /// The share is `ranges` from now on (frames sent already are not sent
  /// again). False once the send has ended (close()): nothing would send them.
  bool set(const std::vector<std::uint64_t>& ranges);
  /// Nothing more is wanted (the asker let this holder go).
  void stop();
  /// Called whenever the share changes (the sending connections wake up).
  std::function<void()> on_change;
  /// The next frame to send, marked sent; none when the share is all sent.
  std::optional<std::uint64_t> next();
  /// The send ended: set() refuses from now on.
  void close() { closed_ = true; }
  /// A new send of the same state to the same peer: its share is `ranges`,
  /// still without the frames sent before.
  void reopen(const std::vector<std::uint64_t>& ranges) {
    closed_ = false;
    (void)set(ranges);
  }
  bool closed() const { return closed_; }
  std::uint64_t frames() const { return wanted_.size(); }

 private:
  std::vector<bool> wanted_;
  std::vector<bool> sent_;
  std::uint64_t cursor_ = 0;  // no wanted, unsent frame below it
  bool closed_ = false;
};

/// Frame `i`'s payload: where it lies, or read into `scratch` (which
/// stays untouched until the frame is sent). Errors: those of reading it.
using FrameBytes = std::function<Result<std::span<const std::byte>>(std::uint64_t i, Buffer& scratch)>;

/// After the peer's state_accept: sends `frames` state frames of `round`,
/// each `frame(i)`, to `peer` over all of the pair's connections (all of
/// them, or an error naming what failed). The bytes must not change while
/// they are sent (state_source.h: a checkpoint's mapping, open round-log
/// entries, or a copy). `wants`: the frames to send (a share, or what a
/// resumed transfer misses), which may change while they go out; null: all
/// of them. Returns the frame bytes sent (headers included).
asio::awaitable<Result<std::uint64_t>> send_state_frames(transport::Mesh& mesh, const std::string& peer,
                                                         std::uint64_t job_id, std::uint64_t round,
                                                         std::uint64_t frames, FrameBytes frame,
                                                         std::shared_ptr<FrameWants> wants = nullptr);

/// How an offer's frames are numbered: the state's anchor then momentum,
/// `chunk_values` values a frame (none when the offer is `from_held`), then
/// each round-log entry's bytes, `chunk_bytes()` a frame.
struct OfferFrames {
  std::uint64_t chunk_values = 0;
  std::uint64_t chunks = 0;          ///< frames per tensor
  std::vector<std::uint64_t> first;  ///< per entry: its first frame
  std::uint64_t total = 0;
  std::uint64_t chunk_bytes() const { return chunk_values * sizeof(float); }
  /// Where frame `i` goes: entry -1 and tensor 0 (anchor) or 1 (momentum),
  /// else the entry's index; `begin` and `size` in bytes. None: no such frame.
  struct Place {
    int entry = -1;
    int tensor = 0;
    std::uint64_t begin = 0;
    std::uint64_t size = 0;
  };
  std::optional<Place> place(std::uint64_t i, const StateOfferMessage& offer) const;
};
OfferFrames offer_frames(const StateOfferMessage& offer);

/// The round and anchor digest of the state an offer's frames carry (the
/// base, when entries follow it).
inline std::uint64_t offer_base_round(const StateOfferMessage& o) { return o.base_round.value_or(o.round); }
inline const std::string& offer_base_digest(const StateOfferMessage& o) {
  return o.base_round ? o.base_digest : o.anchor_digest;
}

/// A transfer being received: created from the offer, fed the state frames.
class StateReceiver {
 public:
  /// Errors: invalid_argument (an offer without state, or one too large).
  static Result<StateReceiver> start(const std::string& peer, const StateOfferMessage& offer);

  /// Takes a state frame from one of the transfer's donors, in any order.
  /// A frame taken already is ignored once the transfer has had more than
  /// one donor (shares change while frames are on the wire). Errors:
  /// mismatch (from a peer that is no donor, a place outside the state or,
  /// with one donor only, already filled, wrong size, another round), after
  /// which the transfer is void.
  Status add(const std::string& peer, const transport::FrameHeader& header, std::span<const std::byte> payload);
  bool complete() const { return received_ == frames_.total; }
  /// After complete(): checks the base's anchor and momentum digests (the
  /// entries are checked when they are parsed). Errors: mismatch.
  Status verify() const;
  /// Whether `offer` is of the same state (round, digest, size, framing):
  /// then a transfer broken off by its donor can go on from that peer.
  bool continues(const StateOfferMessage& offer) const;
  /// Takes frames from `peer` too (a holder that helps, or one that goes
  /// on after the others stopped), keeping every frame taken so far.
  void add_donor(const std::string& peer);
  /// Takes no more frames from `peer` (it stopped sending).
  void remove_donor(const std::string& peer);
  bool has_donor(const std::string& peer) const;
  /// Whether `peer` was ever a donor of this transfer: its frames are still
  /// taken after it was let go (they were on the wire; they count).
  bool was_donor(const std::string& peer) const { return ever_.count(peer) != 0; }
  /// The donors sending now, in the order they joined.
  const std::vector<std::string>& donors() const { return donors_; }
  /// Every donor that sent a frame of this transfer, in order.
  const std::vector<std::string>& senders() const { return senders_; }
  /// The frames not taken yet, as [begin, end) pairs: at most `max_ranges`,
  /// the last one then reaching to the end (a frame taken already that
  /// comes again in a resumed transfer is ignored, not refused).
  std::vector<std::uint64_t> missing(std::size_t max_ranges = 2048) const;
  /// Who sends which frame. A donor's share is the frames it was asked for
  /// that are not in yet; when they are all in (by a frame, or by a change of
  /// shares that left it none), take_share_done() names it.
  /// Each returns the shares that changed, as (donor, [begin, end) pairs of
  /// at most `max_ranges`) to put in accepts.
  using Shares = std::vector<std::pair<std::string, std::vector<std::uint64_t>>>;
  /// The first donor: every frame not in yet.
  Shares share_all(const std::string& peer, std::size_t max_ranges = 2048);
  /// The first donor when `holders` are expected: the lowest 1/holders of
  /// the frames not in yet; the rest is nobody's until one joins
  /// (share_with) or is given them (share_out("")).
  Shares share_first(const std::string& peer, std::size_t holders, std::size_t max_ranges = 2048);
  /// Frames not in yet that no donor is asked for.
  std::uint64_t unowned() const;
  /// A donor joins (add_donor() first): it takes every frame nobody is
  /// asked for, and from each share above an equal part of what is missing
  /// the frames above that part (their owner sends its lowest frames first,
  /// so those are the least likely on the wire already).
  Shares share_with(const std::string& joining, std::size_t max_ranges = 2048);
  /// A donor stopped (remove_donor() first): its frames not in yet are
  /// split, in contiguous parts, among the donors left, added to their shares.
  Shares share_out(const std::string& stopped, std::size_t max_ranges = 2048);
  /// The donors whose shares were completed since the last call, once each.
  std::vector<std::string> take_share_done();
  std::uint64_t frames_taken() const { return received_; }
  std::uint64_t frames() const { return frames_.total; }

  const StateOfferMessage& offer() const { return offer_; }
  /// The first donor.
  const std::string& peer() const { return first_; }
  /// Frame bytes taken so far (headers included).
  std::uint64_t bytes() const { return bytes_; }
  std::vector<float>& anchor() { return anchor_; }
  std::vector<float>& momentum() { return momentum_; }
  /// The round-log entries' bytes, one per offered entry.
  const std::vector<Buffer>& deltas() const { return deltas_; }

 private:
  std::string first_;
  std::vector<std::string> donors_;
  std::set<std::string> ever_;
  std::vector<std::string> senders_;
  StateOfferMessage offer_;
  OfferFrames frames_;
  std::vector<bool> have_;  ///< per frame (OfferFrames' numbering)
  std::uint64_t received_ = 0;
  std::uint64_t bytes_ = 0;
  bool shared_ = false;  ///< had a second donor: a frame taken already may come again
  std::vector<std::uint64_t> share_of(const std::string& peer) const;
  void count_shares();
  std::vector<std::string> owner_;                    ///< per frame: whose share it is ("" none)
  std::map<std::string, std::uint64_t> outstanding_;  ///< per donor: frames of its share not in yet
  std::vector<std::string> share_done_;
  std::vector<float> anchor_;
  std::vector<float> momentum_;
  std::vector<Buffer> deltas_;
};

}  // namespace geoloco::daemon
