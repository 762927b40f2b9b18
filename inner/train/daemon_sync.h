// geoloco-train's side of the local sync protocol (DESIGN §3): rank 0
// connects to its daemon, trains directly in the shared-memory segment the
// daemon hands over, and at every sync point (each H steps) hands every
// fragment's replica over and waits for the new anchor. Built on
// inner/protocol/client.h; nothing here knows about other sites.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "inner/layout.h"
#include "inner/protocol/client.h"
#include "inner/train/run_training.h"

namespace geoloco::inner {

/// The protocol's view of a parameter layout (same names, shapes and offsets).
protocol::Layout to_protocol_layout(const ParamLayout& layout);

class DaemonSync {
 public:
  /// Connects and says HELLO with `layout`. Errors: the daemon's refusal,
  /// timeout ("is geolocod running with this job?"), io.
  static Result<std::unique_ptr<DaemonSync>> connect(const std::string& socket_path, const std::string& job,
                                                     const ParamLayout& layout, int timeout_ms);

  /// The shared parameters: train in place.
  std::span<float> parameters() { return client_->parameters(); }
  /// False when the daemon wants this trainer's initial parameters.
  bool anchor_ready() const { return client_->anchor_ready(); }
  /// After initializing parameters(): hands them over and waits for the
  /// anchor the daemon settles on (it may be another site's).
  Status hand_over_initial();
  /// The on_sync hook: SYNC every fragment (round, tokens, mean loss), then
  /// wait for each RESULT; sets point.stop when the daemon ends the job.
  /// Errors: the daemon's refusal, timeout, io.
  Status sync(SyncPoint& point);

  std::uint64_t syncs() const { return syncs_; }
  /// The round the trainer trains next: WELCOME's (or INIT's answer's), then
  /// the last RESULT's next round (fragment 0's: all fragments sync together).
  std::uint64_t next_round() const { return client_->next_round(0); }

 private:
  DaemonSync(std::unique_ptr<protocol::Client> client, int timeout_ms)
      : client_(std::move(client)), timeout_ms_(timeout_ms) {}
  std::unique_ptr<protocol::Client> client_;
  int timeout_ms_;
  std::uint64_t syncs_ = 0;
};

}  // namespace geoloco::inner
