// A job's control messages to its peers, in order per peer. Each peer's
// frames wait in a queue and go out one at a time; a frame the mesh cannot
// send (the peer is down or not yet connected) is tried again after growing
// pauses and then given up, counted and logged: the control protocol is
// built for lost messages (sites resend READY, the coordinator plans again).
// A peer that stays away keeps only its newest frames queued.
//
// send_now() bypasses the queue for messages a peer needs at once (STATE_
// SYNC's offer and accept: a joining peer should not wait behind retries to
// another incarnation of it); lost when the peer is not connected, and the
// asker asks again.
//
// Runs on the daemon's executor, as the Mesh does; the pending sends hold the
// outbox alive (shared_from_this), and the Mesh must outlive them.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "transport/mesh.h"

namespace geoloco::daemon {

struct OutboxOptions {
  std::size_t max_queued = 1024;         ///< per peer; beyond it the oldest is dropped
  int tries = 5;                         ///< sends of one frame before it is given up
  std::chrono::milliseconds pause{200};  ///< after try k (from 1), k × pause
};

class ControlOutbox : public std::enable_shared_from_this<ControlOutbox> {
 public:
  /// `label` prefixes the log lines (the job's name).
  static std::shared_ptr<ControlOutbox> create(asio::any_io_executor executor, transport::Mesh& mesh, std::string label,
                                               OutboxOptions options = {});

  /// Queues the frame behind the peer's earlier ones.
  void send(const std::string& peer, const transport::FrameHeader& header, std::string payload);
  /// Sends at once, beside the queue, tried once; a loss is counted, and
  /// logged when `log_loss`.
  void send_now(const std::string& peer, const transport::FrameHeader& header, std::string payload,
                bool log_loss = true);

  /// The link to `peer` is up again: a frame waiting out a pause between
  /// tries is tried now, not after the pause (the frames behind it, the
  /// newest decisions among them, would wait too).
  void link_up(const std::string& peer);

  /// Frames waiting for `peer` (the one being sent excluded).
  std::size_t queued(const std::string& peer) const;
  /// Frames given up after every try, and frames dropped from a full queue.
  std::uint64_t lost() const { return lost_; }
  std::uint64_t dropped() const { return dropped_; }

 private:
  ControlOutbox(asio::any_io_executor executor, transport::Mesh& mesh, std::string label, OutboxOptions options);
  asio::awaitable<void> drain(std::string peer);

  struct Queue {
    std::deque<std::pair<transport::FrameHeader, std::string>> frames;
    bool draining = false;
    asio::steady_timer* pause = nullptr;  // the pause between tries being waited out, if any
  };
  asio::any_io_executor executor_;
  transport::Mesh& mesh_;
  std::string label_;
  OutboxOptions options_;
  std::map<std::string, Queue> queues_;
  std::uint64_t lost_ = 0, dropped_ = 0;
};

}  // namespace geoloco::daemon
