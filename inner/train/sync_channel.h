// The trainer's link to its site's daemon, as DaemonSync drives it: the
// segment the daemon shares, its fragment table, and SYNC answered by RESULT.
// Two implementations:
//   socket_channel()   the local sync protocol over the job's Unix socket
//                      (protocol::Client): what geoloco-train uses with geolocod
//   sim/site.h         a simulated site in the same process: what `geoloco
//                      simulate` uses, so that its trainers run this code too
// Between sync() and its RESULT the daemon owns the fragment's values: the
// trainer must not write them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "inner/protocol/message.h"

namespace geoloco::inner {

class SyncChannel {
 public:
  virtual ~SyncChannel() = default;

  /// True when the segment holds the anchor (start training from it); false
  /// when the daemon wants the initial parameters: write them into
  /// parameters() and call send_initial().
  virtual bool anchor_ready() const = 0;
  /// The whole segment, laid out by the trainer's layout.
  virtual std::span<float> parameters() = 0;
  /// Fragment f's values of the segment.
  virtual std::span<float> fragment_values(std::uint32_t fragment) = 0;
  /// The fragment table: each fragment's place and the round its next SYNC
  /// carries (the WELCOME's, then each RESULT's).
  virtual const std::vector<protocol::FragmentDesc>& fragments() const = 0;
  /// Hands the initialization in parameters() over and waits for the anchor
  /// the daemon settles on (in the segment). Errors: the daemon's, timeout, io.
  virtual Status send_initial(int timeout_ms) = 0;
  /// SYNC (round, fragment, tokens, mean loss, and the trainer's timing
  /// when it measures it): the fragment's replica is in the segment. Errors: io.
  virtual Status sync(const protocol::SyncMsg& sync) = 0;
  /// The next RESULT: the fragment's new anchor is in the segment. Errors:
  /// the daemon's refusal, timeout, io, malformed.
  virtual Result<protocol::ResultMsg> wait_result(int timeout_ms) = 0;
};

/// Connects a trainer whose model has `layout` to its daemon.
using ChannelFactory = std::function<Result<std::unique_ptr<SyncChannel>>(const Layout& layout)>;

/// The local sync protocol over `socket_path` (HELLO naming `job`), waiting
/// at most `timeout_ms` for the daemon's socket to appear.
ChannelFactory socket_channel(std::string socket_path, std::string job, int timeout_ms);

}  // namespace geoloco::inner
