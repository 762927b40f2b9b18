// The trainer side of the local sync protocol (docs/design.md §3), used by
// geoloco-train (rank 0) and by tests: a blocking client that says HELLO,
// maps the segment the daemon hands over, and then exchanges SYNC for
// RESULT. python/geoloco/sync_client.py is the same client in Python.
//
// A round of a fragment, from the trainer's side:
//   copy the replica into fragment_values(f); sync(next_round(f), f, tokens, loss);
//   (streaming: keep training while the exchange runs)
//   wait_result(); the fragment's new anchor is in fragment_values(f).
// Between sync() and its RESULT the daemon owns the fragment's values: the
// trainer must not write them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "inner/protocol/message.h"
#include "inner/protocol/shared_segment.h"
#include "inner/protocol/unix_socket.h"

namespace geoloco::inner::protocol {

struct ClientOptions {
  /// How long connect() retries while the daemon's socket is not there yet.
  int connect_timeout_ms = 30'000;
  /// How long connect() waits for WELCOME after HELLO (the daemon may first
  /// fetch the anchor from a peer).
  int welcome_timeout_ms = 600'000;
  WireLimits limits;
};

class Client {
 public:
  /// Connects to the daemon, sends HELLO with `layout` (which must pass
  /// check_layout) and waits for WELCOME. Errors: the daemon's refusal with
  /// its code and reason ("daemon refused HELLO: ..."), timeout, io,
  /// malformed (the daemon broke the protocol).
  static Result<std::unique_ptr<Client>> connect(const std::string& socket_path, const std::string& job,
                                                 const Layout& layout, const ClientOptions& options = {});
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// True when the segment holds the anchor (start training from it); false
  /// when the daemon wants the initial parameters: write them into
  /// parameters() and call send_initial().
  bool anchor_ready() const { return anchor_ready_; }
  /// The whole segment, laid out by the layout sent in HELLO.
  std::span<float> parameters() { return segment_.values(); }
  std::span<float> fragment_values(std::uint32_t fragment);
  const std::vector<FragmentDesc>& fragments() const { return fragments_; }
  /// The round the next SYNC of `fragment` must carry.
  std::uint64_t next_round(std::uint32_t fragment) const { return fragments_.at(fragment).next_round; }
  /// True once a RESULT said the job is finished.
  bool stopped() const { return stopped_; }
  int fd() const { return socket_.get(); }
  /// The job's phase plan, when the daemon's WELCOME carried it.
  const std::optional<PhasePlan>& plan() const { return plan_; }

  /// Sends INIT and waits for the RESULT that says the anchor is in the
  /// segment (it may differ from what was sent). Errors: as wait_result().
  Status send_initial(int timeout_ms);

  /// Sends SYNC; the fragment's replica must already be in the segment.
  /// The daemon decides whether the round is right; its refusal comes back
  /// from wait_result(). `timing`: what the trainer measured of its time
  /// since its previous SYNC, when it does. Errors: io.
  Status sync(std::uint64_t round, std::uint32_t fragment, std::uint64_t tokens, double loss,
              std::optional<SyncTiming> timing = std::nullopt);

  /// Waits for the next RESULT (or refusal). Errors: the daemon's refusal
  /// (its code, "daemon refused SYNC (round r, fragment f): reason"),
  /// timeout, io (the daemon closed the connection), malformed (a RESULT
  /// for a fragment that was not synchronized, an unexpected message).
  Result<ResultMsg> wait_result(int timeout_ms);

  /// Sends raw bytes (tests use it to play a broken trainer). Errors: io.
  Status send_raw(std::span<const std::byte> bytes);

 private:
  Client() = default;
  Status send_message(const Message& message);
  /// The next message from the daemon; descriptors that arrive go to fds_.
  Result<Message> receive(int timeout_ms);
  Status refusal(const ErrorMsg& e) const;
  Result<ResultMsg> accept_result(const ResultMsg& r);

  UniqueFd socket_;
  MessageBuffer inbox_;
  SharedSegment segment_;
  Layout layout_;
  std::vector<FragmentDesc> fragments_;
  std::vector<bool> in_flight_;
  std::vector<UniqueFd> fds_;
  bool anchor_ready_ = false;
  std::optional<PhasePlan> plan_;
  bool init_pending_ = false;
  bool stopped_ = false;
};

}  // namespace geoloco::inner::protocol
