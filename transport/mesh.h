// The site's mesh of authenticated connections to its peers (docs/design.md §3):
// `connections_per_peer` data connections and one control connection per
// peer pair, dialed by the site whose name sorts first and accepted by the
// other, re-dialed with backoff when they drop. The accepting side knocks
// (a `knock` frame on a connection of its own, then closed) when it starts
// and while its control connection is down, and the dialer, woken, dials at
// once: a site back from a restart does not wait out its peers' backoff
// (up to `reconnect_max`). Every connection starts with
// HELLO (the claimed site name, the connection's slot); the claim must match
// the verified certificate and a configured peer, or the connection is
// refused.
//
// The control connection (slot `control_slot()`, after the data slots)
// carries control frames only, and the data connections carry none: a
// heartbeat, PLAN or ABORT never waits behind a data frame whose operation
// this site has not begun (a wait that, with both on one connection, could
// last until the peer gave up on the operation: the frame that would let
// this site begin it was queued behind it).
//
// Frames for the job's current operation (round, attempt) go to the
// registered FrameSink; frames for a later operation wait (the reader stops
// reading, so TCP flow control bounds memory) until this site begins it, or
// declines it: a declined operation's frames are read and dropped, so an
// operation this site will never run (it is catching up, or the plan was
// superseded) cannot stop a reader and the control frames behind it. Frames
// for an earlier operation, another job, or that the sink refuses are
// refused: logged, counted, and the connection closed. Nothing of the sink's
// state changes for a refused frame.
//
// Certificates change without a restart (reload_tls()): connections made
// from then on use the new context, live connections whose peer the new CA
// or CRL refuses are closed, and every other live connection is replaced by
// a new one without losing or reordering a frame. The dialing side opens
// the replacement (asked by a `redial` frame when the acceptor reloaded),
// its hello says it replaces a live connection, and each side then sends a
// `goodbye` as its last frame on the old connection and goes on over the
// new one; a slot's new connection is read only once its old one has been
// read up to the peer's goodbye, so the frames of a slot keep their order.
//
// All members run on one executor (a single-threaded io_context). The
// connections do their work (TLS, hashing, socket I/O) on strands of a
// second executor, the site's I/O threads, so one site encrypts and decrypts
// on several cores; the mesh awaits them from its own executor. A Mesh must
// outlive the handlers it spawned on both (stop(), then let both finish,
// then destroy), and the I/O threads' context must outlive the Mesh.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <compare>
#include <optional>
#include <cstdint>
#include <deque>
#include <set>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/repeat_filter.h"
#include "common/status.h"
#include "common/async_util.h"
#include "transport/connection.h"
#include "transport/options.h"
#include "transport/peer_links.h"
#include "transport/tls/tls_context.h"

namespace geoloco::transport {

struct PeerAddress {
  std::string name;
  std::string host;
  std::uint16_t port = 0;
  bool operator==(const PeerAddress&) const = default;
};

struct MeshOptions {
  std::string site;                       ///< this site's name (must match its certificate)
  std::string listen_host = "127.0.0.1";  ///< address to accept peers on
  std::uint16_t listen_port = 0;          ///< 0: any free port (see Mesh::port())
  std::vector<PeerAddress> peers;         ///< every other site this one may talk to
  tls::TlsFiles tls;                      ///< CA, certificate, key (unused in plaintext test mode)
  /// The job whose frames this mesh carries (set_job() changes it). Job 0 is
  /// the federation itself: hellos and federation-level control frames
  /// (e.g. a job's distribution) carry 0 and are always accepted.
  std::uint64_t job = 0;
  TransportOptions transport;
};

/// Which collective operation a frame belongs to; operations are ordered.
struct OpKey {
  std::uint64_t round = 0;
  std::uint32_t attempt = 0;  ///< the plan's attempt of the round
  auto operator<=>(const OpKey&) const = default;
};

/// Receives the frames of the current operation.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  /// Before the payload is read: may this peer send this frame now?
  /// An error refuses it (its message is logged and counted).
  virtual Status admit(const std::string& peer, const FrameHeader& header) = 0;
  /// The verified payload of an admitted frame. An error refuses it.
  virtual Status deliver(const std::string& peer, const FrameHeader& header, Buffer payload) = 0;
  /// A connection to `peer` closed while the operation ran.
  virtual void peer_lost(const std::string& peer, const Status& reason) = 0;
  /// This site gives the operation up (Mesh::cancel): it ends with `why` and
  /// reads none of its inputs any more.
  virtual void cancel(const Status& why) = 0;
};

class Mesh {
 public:
  /// `connection_executor`: where connections work, each on its own strand
  /// (a thread pool's executor; default: `executor`, all on one thread).
  Mesh(asio::any_io_executor executor, MeshOptions options, asio::any_io_executor connection_executor = {});
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  /// Binds the listener (so port() is known before peers are told it).
  /// Errors: invalid_argument (options, TLS files), io (bind failed).
  Status listen();
  /// Sets a peer's address before start() (e.g. a port learned from listen()).
  void set_peer_address(const PeerAddress& peer);
  /// Listens if not yet listening, then starts accepting and dialing.
  Status start();
  /// Closes everything; spawned handlers finish on their own.
  void stop();
  /// Uses `files` from now on: a new TLS context for new connections; live
  /// connections whose peer's certificate the new CA or CRL refuses are
  /// closed (and the refusal logged, naming the peer); every other live
  /// connection is replaced by one made with the new context, without
  /// losing a frame. Errors (nothing changes): those of tls::make_context,
  /// and a certificate that is not valid now for this site.
  Status reload_tls(const tls::TlsFiles& files);
  /// Connections replaced after a reload (each retired once both sides said
  /// goodbye on it).
  std::uint64_t replaced_connections() const { return replaced_connections_; }
  /// Replaced connections still being read to the peer's goodbye.
  std::size_t retiring_connections() const {
    std::size_t n = 0;
    for (const auto& [key, list] : retiring_) n += list.size();
    return n;
  }
  /// Each connected peer's certificate notAfter (Unix seconds), the earliest
  /// over its live connections.
  std::map<std::string, std::int64_t> peer_certificate_expiries() const;
  /// The bound port (useful with listen_port 0).
  std::uint16_t port() const { return port_; }

  /// The slot of the control connection: data slots are 0..control_slot()-1.
  int control_slot() const { return options_.transport.connections_per_peer; }

  /// Waits until every slot to each of `peers` is connected. Errors: timeout
  /// naming the peers still missing.
  asio::awaitable<Status> wait_connected(std::vector<std::string> peers, std::chrono::milliseconds timeout);
  /// Slot k's connection to `peer`, or null when it is not connected.
  std::shared_ptr<Connection> connection(const std::string& peer, int k) const;

  /// Makes `key` the current operation, delivered to `sink`, and releases
  /// frames that waited for it.
  void begin(OpKey key, FrameSink* sink);
  /// The operation begun last, if any.
  std::optional<OpKey> current() const { return have_current_ ? std::optional<OpKey>(current_) : std::nullopt; }
  /// Ends the current operation: its late frames are refused as stale.
  void end(OpKey key);
  /// Gives the current operation up if it is `key` (FrameSink::cancel): its
  /// all-reduce ends with `why` at once, e.g. when the job stops.
  void cancel(OpKey key, const Status& why);
  /// This site will not run operation `key` (a later one than the current):
  /// its frames are dropped as they come, and any that wait are released.
  /// The newest 64 declined keys are remembered. Operations run in key
  /// order, so neither will one older than the newest declined (and not
  /// begun): frames of an operation this site never heard of (a PLAN it
  /// refused) are dropped too, rather than wait forever in front of the
  /// state frames that share their connection.
  void decline(OpKey key);
  /// Frames dropped because their operation was declined.
  std::uint64_t declined_frames() const { return declined_frames_; }
  /// Control and state frames of a job this mesh does not serve, read and
  /// dropped: a peer's job may start a moment before this site's (its job
  /// start is on its way), so they close nothing.
  std::uint64_t foreign_job_frames() const { return foreign_job_frames_; }

  /// Makes `job` the job whose data and control frames are accepted; frames
  /// of any other job (but the federation's, 0) are refused from now on.
  /// Operations start over: the new job's first round may be numbered below
  /// the last one of the previous job.
  void set_job(std::uint64_t job);
  std::uint64_t job() const { return options_.job; }

  /// Control-plane frames (FrameType::control, on the control connection,
  /// and FrameType::state, on the data connections) of the current job or of
  /// the federation (job 0) bypass the operation gate and go to this handler
  /// as they arrive, in order per connection; an error refuses the frame. Without a handler, control frames are
  /// refused.
  using ControlHandler = std::function<Status(const std::string& peer, const FrameHeader& header, Buffer payload)>;
  void set_control_handler(ControlHandler handler) { control_handler_ = std::move(handler); }
  /// Sends a control frame to `peer` on the control connection (control
  /// messages of one pair stay in order). Errors: io (not connected, write
  /// failed).
  asio::awaitable<Status> send_control(const std::string& peer, std::uint64_t round,
                                       std::span<const std::byte> payload);
  /// As send_control, with the frame's job and chunk index chosen by the
  /// caller (job 0: a federation-level message). Errors: invalid_argument
  /// (not a control frame), io.
  asio::awaitable<Status> send_control_frame(const std::string& peer, FrameHeader header,
                                             std::span<const std::byte> payload);
  /// Sends a state frame (bulk, gate-free, for the control handler) on data
  /// connection `slot` (0..connections_per_peer-1; frames of one slot stay in
  /// order, frames of different slots may overtake each other). Errors:
  /// invalid_argument (not a state frame, not a data slot), io.
  asio::awaitable<Status> send_state_frame(const std::string& peer, FrameHeader header,
                                           std::span<const std::byte> payload, int slot);

  /// The control connection to `peer` came up (`up`), or closed with
  /// `why` and no new one replaced it (the peer's process stopped, the link
  /// dropped): what a coordinator needs to count a site out at once instead
  /// of after a heartbeat timeout. Called on the mesh's executor.
  using LinkHandler = std::function<void(const std::string& peer, bool up, const Status& why)>;
  void set_link_handler(LinkHandler handler) { link_handler_ = std::move(handler); }
  /// Each peer's link as this site sees it (up, since, last error, failed dials).
  const std::map<std::string, PeerLink>& peer_links() const { return links_.links(); }

  const std::string& site() const { return options_.site; }
  /// Chunk buffers shared by this mesh's connections and operations.
  BufferPool& pool() { return pool_; }
  const MeshOptions& options() const { return options_; }
  asio::any_io_executor executor() const { return executor_; }

  struct Rejection {
    std::string peer;
    Status reason;
  };
  /// The most recent refusals (up to 64), oldest first.
  const std::deque<Rejection>& rejections() const { return rejections_; }
  std::uint64_t rejected_frames() const { return rejected_total_; }
  /// Warnings logged about refusals: repeats of one refusal within 30 s are
  /// counted, and the count logged, instead of one warning each.
  std::uint64_t refusal_lines_logged() const { return refusal_lines_; }
  std::uint64_t bytes_sent(const std::string& peer) const;
  std::uint64_t bytes_received(const std::string& peer) const;

 private:
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve_incoming(asio::ip::tcp::socket socket);
  asio::awaitable<void> dial_loop(PeerAddress peer, int slot);
  /// A connection to `peer`, TLS done and its certificate checked against
  /// its name, started; not installed in any slot.
  asio::awaitable<Result<std::shared_ptr<Connection>>> open_to(const PeerAddress& peer);
  /// For a peer that dials this site: knocks (FrameType::knock) at the
  /// start and whenever its control connection is down, backing off as a
  /// dialer does, so a site that starts does not wait out its dialer's backoff.
  asio::awaitable<void> knock_loop(PeerAddress peer);
  /// `peer`, which this site dials, knocked: its dialers stop waiting and dial.
  void knocked(const std::string& peer);
  /// One connection dialed, installed and its reader started; `replacement`:
  /// it retires the slot's live connection gracefully.
  asio::awaitable<Status> dial_once(const PeerAddress& peer, int slot, bool replacement);
  /// Reads `conn` until it closes, or until the peer's goodbye.
  asio::awaitable<void> read_loop(std::string peer, int slot, std::shared_ptr<Connection> conn);
  /// Was the slot's live connection made before a replacement was asked for?
  bool replacement_wanted(const std::string& peer, int slot) const;
  /// Why a frame of this type may not come on `slot`, if it may not.
  Status check_slot(const std::string& peer, FrameType type, int slot) const;
  /// Every slot: the data slots and the control slot.
  int slot_count() const { return options_.transport.connections_per_peer + 1; }
  /// True: deliver the frame to the sink; false: its operation was declined, drop it.
  asio::awaitable<Result<bool>> admit(const std::string& peer, const FrameHeader& header, Connection& conn);
  std::shared_ptr<Connection> wrap(asio::ip::tcp::socket socket);
  asio::any_io_executor connection_strand() const;
  /// Makes `conn` slot `slot`'s connection to `peer`. A `replacement` (its
  /// hello said so) retires the live one gracefully (goodbye, read to the
  /// peer's goodbye); otherwise a live one is closed.
  void install(const std::string& peer, int slot, std::shared_ptr<Connection> conn, bool replacement);
  /// Sends this site's goodbye on a retiring connection.
  asio::awaitable<void> say_goodbye(std::string peer, int slot, std::shared_ptr<Connection> conn);
  /// The retiring connection `conn` is done with in one direction; closed
  /// and forgotten once both are.
  void goodbye_done(const std::string& peer, int slot, const Connection* conn, bool ours);
  /// The peer's goodbye arrived on `conn`: nothing more comes on it. True:
  /// its reader's work is done (a retiring connection, or the slot's own
  /// one whose replacement this site has yet to install); false: closed.
  bool goodbye_heard(const std::string& peer, int slot, const std::shared_ptr<Connection>& conn);
  /// Forgets a retiring connection that ended (closed, or both goodbyes).
  void forget_retiring(const std::string& peer, int slot, const Connection* conn);
  /// May `conn`'s reader read now? Not while an older connection of its
  /// slot is still being read.
  bool may_read(const std::string& peer, int slot, const Connection* conn) const;
  /// Asks the slots' dialers to replace each live connection to `peer` (this site dials it).
  void replace_connections(const std::string& peer);
  /// Asks `peer`, which dials this site, to replace its connections; kept
  /// owed until the redial frame is written.
  void send_redial(const std::string& peer);
  /// Re-checks a live connection's peer certificate against the current context.
  asio::awaitable<void> check_again(std::string peer, std::shared_ptr<Connection> conn);
  void reject(const std::string& peer, Connection* conn, Status reason);
  void log_refusals(const std::vector<std::string>& lines);
  asio::awaitable<void> flush_refusal_log();
  bool is_peer(const std::string& name) const;
  /// Every connection to `peer`: the slots' and the retiring ones.
  void for_each_connection(const std::string& peer, const std::function<void(const Connection&)>& fn) const;
  void for_each_connection_ptr(const std::string& peer,
                               const std::function<void(const std::shared_ptr<Connection>&)>& fn) const;

  asio::any_io_executor executor_;
  asio::any_io_executor connection_executor_;
  MeshOptions options_;
  std::shared_ptr<asio::ssl::context> ssl_;
  std::shared_ptr<TokenBucket> limiter_;
  BufferPool pool_;
  asio::ip::tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  bool running_ = false;
  bool listening_ = false;

  std::map<std::string, std::vector<std::shared_ptr<Connection>>> slots_;
  // A slot's connections that a replacement retired, oldest first, still
  // read until the peer's goodbye. `ours`/`theirs`: goodbye sent/received.
  struct Retiring {
    std::shared_ptr<Connection> conn;
    bool ours = false;
    bool theirs = false;
  };
  std::map<std::pair<std::string, int>, std::deque<Retiring>> retiring_;
  // A slot's connection on which the peer said goodbye before this site
  // installed the replacement.
  std::map<std::pair<std::string, int>, std::shared_ptr<Connection>> early_goodbyes_;
  // Per slot: connections installed so far (the current one's number), and
  // the number up to which a reload wants them replaced.
  std::map<std::pair<std::string, int>, std::uint64_t> installs_;
  std::map<std::pair<std::string, int>, std::uint64_t> replace_upto_;
  // Peers that dial this site and still have to be asked to redial.
  std::set<std::string> redial_owed_;
  std::uint64_t replaced_connections_ = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> retired_bytes_;  // sent, received
  Signal slots_changed_;
  // Each dialer's backoff timer (by peer, then slot), and the knocks heard
  // from each peer: a knock cancels the timers and restarts the backoff.
  std::map<std::string, std::vector<std::unique_ptr<asio::steady_timer>>> dial_timers_;
  std::map<std::string, std::uint64_t> knocks_;
  std::map<std::string, std::unique_ptr<asio::steady_timer>> knock_timers_;  // each knock loop's backoff

  OpKey current_{};
  bool have_current_ = false;
  FrameSink* sink_ = nullptr;
  std::set<OpKey> declined_;
  std::optional<OpKey> newest_declined_;  ///< since the last begin() of a key at least as new
  std::uint64_t declined_frames_ = 0;
  std::uint64_t foreign_job_frames_ = 0;
  Signal op_changed_;
  ControlHandler control_handler_;
  LinkHandler link_handler_;
  PeerLinks links_;

  std::deque<Rejection> rejections_;
  std::uint64_t rejected_total_ = 0;
  // Refusals logged once per 30 s per line (ports left out), with their
  // count: a flood of bad connections is one warning, not one per socket.
  RepeatFilter refusal_log_{std::chrono::seconds(30)};
  std::uint64_t refusal_lines_ = 0;
  asio::steady_timer refusal_flush_;
};

}  // namespace geoloco::transport
