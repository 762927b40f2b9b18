// The daemon's view of one job's trainer on this site (docs/design.md §2, §3): hosts
// the daemon side of the local sync protocol (inner/protocol/server.h) on the
// job's Unix socket inside geolocod's single-threaded asio loop, and turns
// the trainer's messages into the few awaitable steps the round engine needs:
//
//   initial parameters  set_anchor(θ, r) before the trainer comes, or
//                       co_await initial_parameters() then publish_initial(θ)
//   each round          co_await next_phase()        -> round, tokens, loss, replica
//                       finish_round(θ_next, stop)   -> the trainer continues from θ_next
//
// What it hides from the engine: which process is attached. A trainer that
// dies mid-phase and comes back (TrainerProcess restarts the built-in one; an
// external one re-attaches) is welcomed with the anchor of the host's current
// round and resumes there; next_phase() just keeps waiting. A trainer that
// dies after its SYNC leaves a complete round behind, which the engine
// finishes as usual; the new trainer is welcomed only after that, with the new
// anchor. Refusals (a wrong layout, a bad SYNC) are logged and counted and
// change no state.
//
// Not here: starting processes (trainer_process.h), outer-loop decisions.
// Single-threaded: every call, and the engine's coroutines, run on the
// executor given to open(); destroy the host before its io_context.
#pragma once

#include <sys/types.h>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "inner/protocol/server.h"
#include "common/async_util.h"

namespace geoloco::daemon {

struct TrainerHostOptions {
  /// The job's Unix socket, e.g. <data_dir>/jobs/<job>/sync.sock (at most 107 bytes).
  std::string socket_path;
  /// The job's name; a trainer's HELLO must name it.
  std::string job;
  /// The layout the job expects; empty: pinned from the first welcomed
  /// trainer's HELLO, and every later trainer must present the same.
  Layout expected_layout;
  /// Fragments of the segment (Streaming DiLoCo's F), cut at tensor
  /// boundaries; a round completes when the trainer has synced all of them,
  /// or, with `streaming`, the one fragment the round syncs.
  std::uint32_t fragments = 1;
  /// Streaming DiLoCo: round r (rounds count from 1) syncs only fragment
  /// fragment_of_round(r, fragments) (diloco/fragments.h).
  /// A SYNC of an older round (a fragment the engine moved past) is a phase
  /// too, which the engine drops with finish_round().
  bool streaming = false;
  /// The round the trainer's first SYNC carries (set_anchor() may move it).
  std::uint64_t first_round = 0;
  /// Without an anchor: ask the first trainer for its initialization (true),
  /// or keep its HELLO waiting until set_anchor() (false; e.g. a site that
  /// fetches the anchor from the coordinator).
  bool ask_for_initial = true;
  /// Refuse a SYNC whose replica holds NaN or Inf, so a diverged trainer
  /// cannot poison the anchor of every site.
  bool check_finite = true;
  /// A connection that has not completed its HELLO this long after it
  /// connected is closed, freeing the job's one trainer slot.
  int hello_timeout_ms = 10'000;
  /// Where the anchor that welcomes a (re)started trainer comes from. Unset:
  /// the host keeps its own copy (4 bytes per parameter). Set: the engine's
  /// anchor of the host's next round, read only when a trainer is welcomed,
  /// so the daemon holds no second copy of the model (docs/design.md §10).
  std::function<std::span<const float>()> anchor_view;
  /// The job's phase plan, for the WELCOME (inner/protocol/message.h).
  std::optional<inner::protocol::PhasePlan> plan;
};

/// One inner phase as the trainer reported it.
struct InnerPhase {
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;  ///< streaming: the fragment synced; else 0 and the replica is the whole model
  std::uint64_t offset = 0;    ///< where `replica` starts in the model's flat buffer
  std::uint64_t tokens = 0;    ///< work units of the phase (the largest a fragment's SYNC reported)
  double loss = 0;             ///< mean training loss of the phase (mean over the fragments' SYNCs)
  /// The trainer's own time since its previous SYNC, when its SYNC carried it
  /// (a phase's fragments carry the same; the last SYNC's is kept).
  std::optional<inner::protocol::SyncTiming> timing;
  /// The replica θ_s in the shared segment (streaming: of the fragment only);
  /// valid and unchanged until finish_round().
  std::span<const float> replica;
};

/// Counters for logs, metrics and tests.
struct TrainerHostStats {
  std::uint64_t hellos = 0;                    ///< HELLOs accepted (a restart adds one)
  std::uint64_t welcomes = 0;                  ///< trainers welcomed (with the anchor or for their initialization)
  std::uint64_t syncs = 0;                     ///< SYNCs accepted (one per fragment and round)
  std::uint64_t rounds = 0;                    ///< rounds finished
  std::uint64_t refusals = 0;                  ///< messages or connections refused
  std::uint64_t departures = 0;                ///< trainers that left (died, closed, dropped for an error)
  std::uint64_t discarded_partial_rounds = 0;  ///< rounds lost because a trainer left after some fragments only
};

class TrainerHost {
 public:
  /// Listens on options.socket_path and serves it on `executor`. Errors:
  /// invalid_argument (no fragments, an empty job, a bad expected layout),
  /// io (the socket).
  static Result<std::unique_ptr<TrainerHost>> open(const asio::any_io_executor& executor, TrainerHostOptions options);
  ~TrainerHost();  ///< close()
  TrainerHost(const TrainerHost&) = delete;
  TrainerHost& operator=(const TrainerHost&) = delete;

  /// The anchor θ_round the next trainer starts from, before any trainer
  /// trains (none attached, or one waiting for its WELCOME or asked for its
  /// initialization: then its INIT is answered with this anchor). Errors:
  /// invalid_argument (a trainer trains or a round is open: the anchor
  /// changes through finish_round(); a size that differs from the layout; a
  /// new round while a trainer was already welcomed for another; stopped).
  Status set_anchor(std::span<const float> anchor, std::uint64_t round);

  /// While paused, what the trainer sends (a HELLO, a SYNC, its hang-up)
  /// waits, unanswered, in the order it came: every answer that reads the
  /// anchor (a welcome, a fragment given back, a round released) is left
  /// until resume(), so the engine may step the anchor in place on other
  /// threads meanwhile. Connections are still accepted and read.
  void pause();
  void resume();
  bool paused() const { return paused_; }
  /// The job's layout, once known from a peer's state: a trainer waiting to
  /// be welcomed with another is refused, naming the first tensor that
  /// differs, and so is every later one. Errors: as Server::expect_layout.
  Status expect_layout(const Layout& layout);

  /// The initialization the first trainer handed over (INIT), when the host
  /// had no anchor and may ask for one. Waits for it. Errors:
  /// invalid_argument (ask_for_initial is off, the anchor was set, or it was
  /// already published), and fail()'s or close()'s status.
  asio::awaitable<Result<std::vector<float>>> initial_parameters();

  /// Settles the initial anchor (the trainer's own initialization or any
  /// other, e.g. the coordinator's): answers a pending INIT, or keeps it for
  /// the next trainer if this one left. Errors: invalid_argument (nothing was
  /// asked for, wrong size).
  Status publish_initial(std::span<const float> anchor);

  /// Waits until the trainer has synced every fragment of the host's next
  /// round and returns that phase. Called again before finish_round(), it
  /// returns the same phase. Errors: invalid_argument (the job was stopped),
  /// and fail()'s or close()'s status.
  asio::awaitable<Result<InnerPhase>> next_phase();

  /// Ends the phase next_phase() returned: writes `new_anchor` (the whole
  /// model; streaming: its fragment of it) into the segment and answers
  /// RESULT with the round after it (`next_round`, default round + 1: a
  /// straggler may be moved ahead; streaming: the fragment's next round at or
  /// after it) and `stop`; the trainer continues from new_anchor, or exits
  /// after a stop.
  /// Works after the trainer left too (the next one is welcomed with
  /// new_anchor). Errors: invalid_argument (no phase is open, wrong size,
  /// next_round not after the round).
  Status finish_round(std::span<const float> new_anchor, bool stop,
                      std::optional<std::uint64_t> next_round = std::nullopt);

  /// Makes every waiting and later next_phase()/initial_parameters() return
  /// `why` (e.g. TrainerProcess gave up restarting the trainer).
  void fail(Status why);
  /// Closes the trainer's connection, stops listening and removes the
  /// socket; waiters return an error. Idempotent.
  void close();

  /// The anchor the trainer trains from now (that of next_round()): the base
  /// of the pseudo-gradient Δ = anchor − replica, also for a straggler whose
  /// engine has moved on. Empty before an anchor is set.
  std::span<const float> anchor() const { return current_anchor(); }
  /// The round the trainer's next SYNC must carry.
  std::uint64_t next_round() const { return next_round_; }
  bool has_anchor() const { return has_anchor_; }
  bool stopped() const { return stopped_; }
  /// True while a trainer is connected (welcomed or not).
  bool trainer_attached() const;
  /// True while a welcomed trainer trains (it has the anchor and sends SYNCs).
  bool trainer_training() const;
  /// The attached trainer's pid (SO_PEERCRED), -1 when none.
  pid_t trainer_pid() const { return trainer_pid_; }
  /// The protocol state (phase, pinned layout, fragments); a refusal leaves it unchanged.
  inner::protocol::ServerSnapshot snapshot() const;
  const TrainerHostStats& stats() const { return stats_; }
  const TrainerHostOptions& options() const { return options_; }

 private:
  TrainerHost(const asio::any_io_executor& executor, TrainerHostOptions options);
  using Descriptor = asio::posix::stream_descriptor;

  // Event plumbing: after every call into the Server, handle its events and
  // follow its descriptors (pump()).
  void pump();
  void settle();
  void handle(inner::protocol::Event& event);
  void on_hello(const inner::protocol::HelloEvent& hello);
  void on_init(const inner::protocol::InitEvent& init);
  void on_sync(const inner::protocol::SyncEvent& sync);
  void on_trainer_left(const inner::protocol::TrainerLeftEvent& left);
  void answer_hello();
  void on_streaming_sync(const inner::protocol::SyncEvent& sync);
  /// Streaming: the round after which the fragment's next SYNC comes.
  std::uint64_t fragment_next_round(std::uint32_t fragment, std::uint64_t after) const;
  void follow_trainer_fd();
  void arm_write();
  asio::awaitable<void> listen_loop(std::shared_ptr<Descriptor> listen, std::shared_ptr<bool> alive);
  asio::awaitable<void> read_loop(std::shared_ptr<Descriptor> trainer, std::uint64_t generation,
                                  std::shared_ptr<bool> alive);
  asio::awaitable<void> write_wait(std::shared_ptr<Descriptor> trainer, std::uint64_t generation,
                                   std::shared_ptr<bool> alive);
  /// Closes a connection that has not completed its HELLO in time (ServerOptions::hello_timeout_ms).
  asio::awaitable<void> hello_watch(std::uint64_t generation, std::shared_ptr<bool> alive);

  std::span<const float> current_anchor() const;
  void keep_anchor(std::span<const float> anchor);
  /// Values of the job's model when known (pinned or expected layout, or the last HELLO), else 0.
  std::uint64_t known_values() const;
  Status waiting_error() const;

  asio::any_io_executor executor_;
  TrainerHostOptions options_;
  std::unique_ptr<inner::protocol::Server> server_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Our own duplicates of the Server's descriptors, registered with asio: we
  // close them ourselves (deregistering first), so the reactor never holds a
  // descriptor the Server closed and whose number the next accept reuses.
  std::shared_ptr<Descriptor> listen_sd_;
  std::shared_ptr<Descriptor> trainer_sd_;
  std::optional<asio::steady_timer> hello_timer_;  ///< hello_watch's sleep, cut short by close()
  ino_t trainer_ino_ = 0;         ///< socket inode of trainer_sd_: tells a new trainer on a reused fd number
  std::uint64_t generation_ = 0;  ///< bumped when the trainer's descriptor changes; stale loops exit
  bool write_armed_ = false;
  bool paused_ = false;  ///< pause(): events wait in the Server's queue
  pid_t trainer_pid_ = -1;

  std::vector<float> anchor_;  ///< own copy when options_.anchor_view is unset
  bool has_anchor_ = false;
  std::uint64_t next_round_ = 0;
  bool stopped_ = false;
  bool closed_ = false;
  Status failed_;

  Layout hello_layout_;         ///< layout of the HELLO waiting for an answer
  std::vector<float> initial_;  ///< the trainer's INIT, until publish_initial()
  bool initial_ready_ = false;
  bool initial_published_ = false;

  // The phase being collected: which fragments of next_round_ have synced
  // (streaming: the one fragment of phase_round_).
  std::vector<bool> synced_;
  std::uint64_t phase_round_ = 0;
  std::uint32_t phase_fragment_ = 0;
  std::uint64_t phase_tokens_ = 0;
  double phase_loss_sum_ = 0;
  std::optional<inner::protocol::SyncTiming> phase_timing_;
  std::uint32_t phase_count_ = 0;
  bool phase_ready_ = false;
  bool phase_released_ = false;  ///< the trainer left after a complete round; its fragments are no longer in flight

  Signal changed_;  ///< wakes next_phase()/initial_parameters() waiters to re-check
  TrainerHostStats stats_;
};

}  // namespace geoloco::daemon
