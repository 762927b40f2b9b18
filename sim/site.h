// One simulated site as its trainer sees it: the daemon's side of the sync
// channel (inner/train/sync_channel.h), in memory. The trainer runs the real
// SyncedTraining on its own thread and talks to this object exactly as
// geoloco-train talks to geolocod over its socket: it is welcomed with a
// fragment table cut as TrainerHost cuts it, hands its initialization over
// (the coordinator's), and answers every SYNC with a RESULT once the
// simulated federation (federation.h) has applied the round.
//
// All state is under the federation's one mutex; the trainer's thread waits
// on its condition variable. abort() wakes every wait with an error, so a
// failing simulation never leaves a trainer thread behind.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "inner/protocol/message.h"
#include "inner/train/sync_channel.h"

namespace geoloco::sim {

/// What the sites and the federation share: one lock, one signal.
struct Monitor {
  std::mutex mutex;
  std::condition_variable changed;
  Status aborted;  ///< set once: every wait returns it
};

/// A finished phase: the SYNC of one round's fragment (or of all fragments).
struct SiteSync {
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;
  std::uint64_t tokens = 0;
  double loss = 0;
};

class SimulatedSite final : public inner::SyncChannel {
 public:
  /// `fragments` (F) and `streaming` as geolocod's TrainerHost has them;
  /// `initializes`: this site's trainer supplies the job's initialization
  /// (the coordinator's), the others are welcomed with it.
  SimulatedSite(Monitor& monitor, std::uint32_t fragments, bool streaming, bool initializes);

  // The trainer's side (its thread).
  bool anchor_ready() const override { return anchor_ready_; }
  std::span<float> parameters() override { return segment_; }
  std::span<float> fragment_values(std::uint32_t fragment) override;
  const std::vector<inner::protocol::FragmentDesc>& fragments() const override { return table_; }
  Status send_initial(int timeout_ms) override;
  Status sync(const inner::protocol::SyncMsg& sync) override;
  Result<inner::protocol::ResultMsg> wait_result(int timeout_ms) override;

  /// The channel factory SyncedTraining connects with: cuts the table from
  /// the trainer's layout; a site that does not initialize waits until the
  /// federation published the anchor (as a HELLO waits for WELCOME).
  inner::ChannelFactory factory();

  // The federation's side, with monitor.mutex held.
  bool connected() const { return connected_; }
  bool initialized() const { return initial_ready_; }
  /// The trainer's initialization (after initialized()).
  std::span<const float> initialization() const { return segment_; }
  /// Copies the anchor into the segment and welcomes the trainer (or answers its INIT).
  void publish_anchor(std::span<const float> anchor);
  /// The SYNCs received and not yet answered.
  const std::vector<SiteSync>& pending() const { return pending_; }
  /// Answers the pending SYNC of `fragment`: its values of `anchor` go into
  /// the segment, and the trainer's next SYNC of it carries `next_round`.
  void answer(std::uint32_t fragment, std::span<const float> anchor, std::uint64_t next_round, bool stop);
  /// The trainer's thread ended (its run's status).
  void finished(Status status);
  bool done() const { return done_; }
  const Status& status() const { return status_; }

 private:
  Monitor& monitor_;
  std::uint32_t fragments_count_;
  bool streaming_;
  bool initializes_;
  std::vector<float> segment_;
  std::vector<inner::protocol::FragmentDesc> table_;
  bool connected_ = false;
  bool anchor_ready_ = false;
  bool initial_ready_ = false;  ///< the trainer's INIT is in the segment
  bool published_ = false;      ///< the anchor is in the segment
  std::vector<SiteSync> pending_;
  std::vector<inner::protocol::ResultMsg> results_;  ///< posted, not yet taken by wait_result
  bool done_ = false;
  Status status_;
};

}  // namespace geoloco::sim
