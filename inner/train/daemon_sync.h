// geoloco-train's side of the local sync protocol: rank 0 connects to its
// daemon (over a SyncChannel: the job's socket, or a simulated site) and
// either (plain DiLoCo) trains directly in the
// shared-memory segment the daemon hands over and at every sync point (each
// H steps) hands every fragment's replica over and waits for the new
// anchor, or (Streaming DiLoCo, streaming.h) trains in its own memory,
// copies the fragments due into the segment and syncs them (hand_out), and
// merges their new global values in later (merge). Nothing here knows
// about other sites.
//
// The round table: each fragment's next round, from WELCOME, then from each
// RESULT (the channel's fragments()).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "inner/layout.h"
#include "inner/train/run_training.h"
#include "inner/train/sync_channel.h"

namespace geoloco::inner {

class DaemonSync {
 public:
  /// Connects through `channel` with `layout` (HELLO). Errors: the
  /// daemon's refusal, timeout ("is geolocod running with this job?"), io,
  /// mismatch (a segment of another size). `timeout_ms` bounds every wait
  /// for the daemon.
  static Result<std::unique_ptr<DaemonSync>> connect(const ChannelFactory& channel, const ParamLayout& layout,
                                                     int timeout_ms);

  /// The shared parameters: train in place.
  std::span<float> parameters() { return channel_->parameters(); }
  /// False when the daemon wants this trainer's initial parameters.
  bool anchor_ready() const { return channel_->anchor_ready(); }
  /// After initializing parameters(): hands them over and waits for the
  /// anchor the daemon settles on (it may be another site's).
  Status hand_over_initial();
  /// Plain DiLoCo's on_sync hook: SYNC every fragment (round, tokens, mean
  /// loss, `timing`), then wait for each RESULT; sets point.stop when the
  /// daemon ends the job. Errors: the daemon's refusal, timeout, io.
  Status sync(SyncPoint& point, const protocol::SyncTiming& timing);

  /// Streaming, at a phase's end: copies each fragment due at next_round()
  /// from `replica` (the trainer's own parameters, laid out as the segment)
  /// into the segment and sends its SYNC with the phase's tokens, mean
  /// loss and `timing`. Returns the fragments now in flight. Errors: io.
  Result<std::vector<std::uint32_t>> hand_out(std::span<const float> replica, std::uint64_t tokens, double loss,
                                              const protocol::SyncTiming& timing);
  /// The delayed outer step: from now on hand_out keeps a copy of what it
  /// syncs, and merge keeps the local progress made since
  /// (merge_fragment_delayed) instead of weighing it by α.
  void use_delayed_merge() { delayed_ = true; }
  /// Streaming, τ steps later: waits for the RESULT of every fragment in
  /// flight and merges its new global values into `replica`
  /// (merge_fragment with `alpha`, or the delayed merge); true when a RESULT
  /// said stop. Errors: the daemon's refusal, timeout, io, malformed.
  Result<bool> merge(std::span<float> replica, double alpha);
  /// Fragments handed out and not merged yet.
  const std::vector<std::uint32_t>& in_flight() const { return in_flight_; }

  std::uint64_t syncs() const { return syncs_; }
  /// The round the trainer syncs next: the smallest next round of the
  /// table (plain: every fragment's, they are equal).
  std::uint64_t next_round() const;
  /// Each fragment's next round (the channel's table: WELCOME's, then each RESULT's).
  std::vector<std::uint64_t> next_rounds() const;
  /// The WELCOME's fragment table (offsets, lengths, next rounds).
  const std::vector<protocol::FragmentDesc>& fragments() const { return channel_->fragments(); }

 private:
  DaemonSync(std::unique_ptr<SyncChannel> channel, int timeout_ms);
  Result<protocol::ResultMsg> wait_result();

  std::unique_ptr<SyncChannel> channel_;
  int timeout_ms_;
  std::uint64_t syncs_ = 0;
  std::vector<std::uint32_t> in_flight_;
  bool delayed_ = false;
  /// With the delayed merge: each fragment's values as hand_out synced them
  /// (the merge's base), laid out as the segment; sized at the first hand_out.
  std::vector<float> at_sync_;
};

}  // namespace geoloco::inner
