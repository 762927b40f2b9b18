// Test helpers: a fake daemon that drives a Server from its own poll() loop
// (so a blocking Client can be tested before the real daemon exists), and a
// raw trainer that writes arbitrary bytes for the refusal tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "inner/protocol/server.h"

namespace geoloco::inner::protocol::testing {

/// A unique socket path under /tmp (short: sockaddr_un holds 107 bytes).
std::string temp_socket_path(const std::string& tag);

struct FakeDaemonConfig {
  std::uint32_t fragments = 1;
  /// Anchor to welcome trainers with; empty: ask the first trainer for its
  /// initial parameters and answer INIT with them plus `init_shift`.
  std::vector<float> anchor;
  float init_shift = 0.0f;
  /// Outer step per fragment: anchor ← anchor − eta·(anchor − replica).
  float eta = 0.5f;
  /// The RESULT of this round carries the stop flag.
  std::uint64_t stop_after_round = std::numeric_limits<std::uint64_t>::max();
  /// Streaming DiLoCo as geolocod numbers its rounds (diloco/fragments.h):
  /// the welcome gives fragment f its first round at or after `first_round`
  /// (F = 3, first round 1: fragment 1 → 1, 2 → 2, 0 → 3) and RESULT(r, f)
  /// names r + F as f's next round. Off: every fragment starts at round 0
  /// and RESULT(r, f) names r + 1.
  bool streaming = false;
  std::uint64_t first_round = 1;
  /// The loop ends by itself after this long, so a failing test cannot hang.
  int deadline_ms = 20'000;
};

struct SyncRecord {
  SyncMsg sync;
  std::vector<float> replica;       ///< what the daemon read
  std::vector<float> anchor_after;  ///< what it wrote back
};

class FakeDaemon {
 public:
  FakeDaemon(std::unique_ptr<Server> server, FakeDaemonConfig config);
  ~FakeDaemon();
  void stop();

  std::vector<SyncRecord> syncs() const;
  std::vector<Status> refusals() const;
  std::vector<Status> departures() const;
  /// Calls into the Server that failed (Catch2 cannot assert off the main thread).
  std::vector<Status> failures() const;
  int hellos() const;
  int inits() const;
  std::vector<float> anchor() const;
  /// Taken by the loop after every batch of events.
  ServerSnapshot snapshot() const;

 private:
  void run();
  void handle(Event& event);

  std::unique_ptr<Server> server_;
  FakeDaemonConfig config_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<SyncRecord> syncs_;
  std::vector<Status> refusals_;
  std::vector<Status> departures_;
  std::vector<Status> failures_;
  int hellos_ = 0;
  int inits_ = 0;
  std::vector<float> anchor_;
  ServerSnapshot snapshot_;
  std::thread thread_;
};

/// A trainer that sends raw bytes; reads pump a Server on the same thread.
class RawTrainer {
 public:
  explicit RawTrainer(const std::string& path);
  void send(std::span<const std::byte> bytes);
  void send(const Message& message);
  /// Pumps `server` (accept, read) and returns the next message the trainer
  /// received, or nullopt when the daemon closed the connection. Fails the
  /// test after `timeout_ms`.
  std::optional<Message> read(Server& server, int timeout_ms = 5000);
  void close() { fd_.reset(); }
  std::vector<UniqueFd> fds;

 private:
  UniqueFd fd_;
  MessageBuffer inbox_;
};

/// Lets the server accept and read whatever is pending.
void pump(Server& server);

}  // namespace geoloco::inner::protocol::testing
