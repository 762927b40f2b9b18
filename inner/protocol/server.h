// The daemon side of the local sync protocol (docs/design.md §3): one Server per job,
// hosted by geolocod's event loop. It owns the job's Unix socket, at most one
// attached trainer, and the shared-memory segment; it checks everything the
// trainer says and turns what is valid into events for the daemon. It makes
// no outer-loop decision: the daemon answers events with welcome(),
// publish_initial() and complete_sync().
//
// Driving it (no threads; every call returns without blocking):
//
//   poll listen_fd() for POLLIN           -> on_listen_readable()
//   poll trainer_fd() for POLLIN          -> on_trainer_readable()
//     and for POLLOUT while wants_write() -> on_trainer_writable()
//   then handle take_events():
//     HelloEvent   -> welcome(fragments, anchor) or welcome_for_initial(fragments),
//                     or drop_trainer(reason) to refuse it
//     InitEvent    -> publish_initial(anchor)  (the anchor may be the trainer's own)
//     SyncEvent    -> read event.replica, later complete_sync(fragment, anchor, next_round, stop)
//     TrainerLeft  -> restart the trainer if the job says so
//     Refusal      -> log it: what the trainer did wrong, as the trainer was told
//
// Ownership of the segment: after WELCOME the trainer owns every fragment;
// SYNC(r, f) hands fragment f to the daemon (the replica is there) until
// RESULT(r, f) hands it back with the new anchor. INIT hands the whole
// segment over until the RESULT for all fragments.
//
// Refusals: a message that breaks a rule gets an ERROR with the reason and
// changes no state (snapshot() is equal before and after). Refusals of a
// HELLO, of the header (bad magic, version, oversize) and a second trainer
// are fatal: the connection is closed after the ERROR. A bad SYNC or INIT
// keeps the connection, so the trainer may send the right one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "inner/protocol/message.h"
#include "inner/protocol/session_rules.h"
#include "inner/protocol/shared_segment.h"
#include "inner/protocol/unix_socket.h"

namespace geoloco::inner::protocol {

struct ServerOptions {
  /// Path of the job's Unix socket (at most 107 bytes); a stale socket file
  /// there is replaced, one served by a live process is refused.
  std::string socket_path;
  /// The job's name; a HELLO naming another job is refused.
  std::string job;
  /// The layout the job expects. Empty: the first welcomed trainer's layout
  /// is adopted, and every later trainer (a restart) must present the same.
  Layout expected_layout;
  /// Bounds on message bodies, checked before allocating.
  WireLimits limits;
  /// Refuse a SYNC whose replica holds NaN or Inf, naming the tensor, so a
  /// diverged trainer cannot poison the anchor of every site. Costs one read
  /// of the fragment.
  bool check_finite = true;
  /// A connection that has not completed its HELLO this long after it was
  /// accepted is closed (hello_deadline(), on_hello_deadline()): a
  /// half-sent HELLO must not hold the job's one trainer slot.
  int hello_timeout_ms = 10'000;
  /// The job's phase plan, sent with every WELCOME (a trainer that takes its
  /// H, τ and α from the daemon reads it); unset: WELCOME carries none.
  std::optional<PhasePlan> plan;
};

/// Where the conversation with the attached trainer stands.
enum class Phase : std::uint8_t {
  no_trainer,      ///< nobody attached
  awaiting_hello,  ///< connected, HELLO not yet received
  hello_pending,   ///< HELLO accepted; the daemon must welcome() or drop_trainer()
  awaiting_init,   ///< welcomed without an anchor; the trainer writes its initial parameters
  init_pending,    ///< INIT received; the daemon must publish_initial()
  training,        ///< the trainer trains and sends SYNCs
};
std::string_view phase_name(Phase phase);

/// A valid HELLO: the layout passed check_layout and matches the pinned or
/// expected one if there is one.
struct HelloEvent {
  std::string job;
  Layout layout;
  pid_t pid = -1;  ///< the trainer's process id (SO_PEERCRED), -1 if unknown
};
/// The trainer's initial parameters are in the segment; valid until publish_initial().
struct InitEvent {
  std::span<const float> parameters;
};
/// A valid SYNC; `replica` (the fragment's values in the segment) stays
/// valid and untouched by a well-behaved trainer until complete_sync().
struct SyncEvent {
  SyncMsg sync;
  std::span<const float> replica;
};
/// The trainer disconnected or was dropped; fragments in flight stay in
/// flight until the daemon completes them (nothing is then sent).
struct TrainerLeftEvent {
  Status reason;
};
/// The library refused a message or a connection and told the trainer so.
struct RefusalEvent {
  Status status;
  bool fatal = false;
};
using Event = std::variant<HelloEvent, InitEvent, SyncEvent, TrainerLeftEvent, RefusalEvent>;

/// Everything that decides how the next message is handled, for tests and
/// logs: a refusal leaves it unchanged.
struct ServerSnapshot {
  Phase phase = Phase::no_trainer;
  Layout layout;  ///< pinned layout (empty until the first welcome without an expected one)
  std::vector<FragmentState> fragments;
  bool operator==(const ServerSnapshot&) const = default;
};

class Server {
 public:
  /// Listens on options.socket_path. Errors: invalid_argument (a bad expected
  /// layout, an empty job name), io (the socket).
  static Result<std::unique_ptr<Server>> open(ServerOptions options);
  ~Server();  ///< closes the trainer, unmaps, removes the socket file
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int listen_fd() const { return listen_.get(); }
  /// The attached trainer's socket, -1 when none.
  int trainer_fd() const { return trainer_.get(); }
  /// Where the attached trainer stands (no_trainer when none).
  Phase phase() const { return phase_; }
  bool wants_write() const { return !outbox_.empty(); }

  /// Accepts pending connections; a second trainer is refused (fatal ERROR).
  void on_listen_readable();
  /// When the attached connection must have completed its HELLO; none once
  /// it has (or with no connection).
  std::optional<std::chrono::steady_clock::time_point> hello_deadline() const;
  /// Closes the connection, with a fatal ERROR and a RefusalEvent, when its
  /// HELLO is not complete by `now` past hello_deadline().
  void on_hello_deadline(std::chrono::steady_clock::time_point now);
  /// Reads what the trainer sent and handles every complete message.
  void on_trainer_readable();
  /// Sends queued messages.
  void on_trainer_writable();
  /// Events produced since the last call, oldest first.
  std::vector<Event> take_events();

  /// Answers a HELLO with the anchor: creates a fresh segment, writes
  /// `anchor` (the whole model) into it and sends WELCOME with the
  /// descriptor and the fragment table (each fragment's next round).
  /// Errors: invalid_argument (no HELLO pending, a fragment still in flight,
  /// a bad fragment table, an anchor of the wrong size), io.
  Status welcome(std::span<const FragmentDesc> fragments, std::span<const float> anchor);
  /// Answers a HELLO asking for the trainer's initial parameters (a fresh
  /// job whose daemon has no anchor yet); the trainer answers with INIT.
  Status welcome_for_initial(std::span<const FragmentDesc> fragments);
  /// Answers INIT: writes `anchor` (the whole model; it may be the trainer's
  /// own parameters) and sends RESULT(round = next round of fragment 0,
  /// fragment = kAllFragments). Errors: invalid_argument (no INIT pending,
  /// wrong size).
  Status publish_initial(std::span<const float> anchor);
  /// Answers SYNC(r, fragment): writes the fragment's new anchor into the
  /// segment and sends RESULT(r, fragment, next_round, stop). Also valid
  /// after the trainer left (then only the round advances). Errors:
  /// invalid_argument (see check_completion).
  Status complete_sync(std::uint32_t fragment, std::span<const float> anchor, std::uint64_t next_round, bool stop);
  /// Sends a fatal ERROR with `reason` and closes the trainer's connection
  /// (e.g. a layout the daemon refuses, or the job was cancelled).
  void drop_trainer(Err code, const std::string& reason);
  /// The job's layout became known (a state taken from a peer carries it):
  /// every trainer from now on must present exactly it, and one whose HELLO
  /// waits with another is refused (fatal ERROR naming the first tensor that
  /// differs, and a RefusalEvent). Errors: invalid_argument (an invalid
  /// layout), mismatch (a trainer was welcomed with another layout; nothing
  /// changes).
  Status expect_layout(const Layout& layout);

  ServerSnapshot snapshot() const;
  const ServerOptions& options() const { return options_; }
  /// The segment's values (empty before the first welcome), for the daemon
  /// and tests; the trainer owns fragments that are not in flight.
  std::span<float> segment_values();

 private:
  explicit Server(ServerOptions options) : options_(std::move(options)), inbox_(options_.limits) {}
  struct Outgoing {
    std::vector<std::byte> bytes;
    std::size_t sent = 0;
    int pass_fd = -1;  ///< attached to the first byte
  };
  void handle(const MessageBuffer::Raw& raw);
  void handle_hello(const HelloMsg& hello);
  void handle_init();
  void handle_sync(const SyncMsg& sync);
  void refuse(const Status& why, MessageType refused, bool fatal, std::uint32_t fragment = kNoFragment,
              std::uint64_t round = 0);
  void send(const Message& message, int pass_fd = -1);
  void flush();
  void close_trainer(Status reason, bool report);
  Status check_welcome(std::span<const FragmentDesc> fragments) const;
  Status do_welcome(std::span<const FragmentDesc> fragments, std::span<const float> anchor, bool anchor_ready);

  ServerOptions options_;
  UniqueFd listen_;
  UniqueFd trainer_;
  pid_t trainer_pid_ = -1;
  Phase phase_ = Phase::no_trainer;
  MessageBuffer inbox_;
  std::uint64_t trainer_generation_ = 0;                // counts accepted trainer connections
  std::chrono::steady_clock::time_point connected_at_;  // when the attached connection was accepted
  std::map<std::uint32_t, std::uint64_t> synced_by_;    // fragment -> the connection that synced it
  std::deque<Outgoing> outbox_;
  std::vector<Event> events_;
  Layout layout_;        ///< pinned layout
  Layout hello_layout_;  ///< layout of the HELLO being answered
  std::vector<FragmentState> fragments_;
  SharedSegment segment_;
};

}  // namespace geoloco::inner::protocol
