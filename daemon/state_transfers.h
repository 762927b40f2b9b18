// The STATE_SYNC transfers of one job on this site (the frames and their
// checks are state_sync.h's): the offers it made that wait for an accept,
// the frames it is sending, and the one transfer it receives, from one
// holder or several at once. JobRun says when (the participant machine
// decides); this class keeps what an offer promised, answers an accept with
// the frames only if it was offered and the state is still that round's,
// changes a sending share when a later accept says so, splits what is
// missing among the holders that send, takes frames only from them, and
// installs a checked state in one step. Everything runs on the job's
// executor.
#pragma once

#include <asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>
#include <optional>
#include <span>
#include <string>

#include "common/layout.h"
#include "common/status.h"
#include "daemon/control_messages.h"
#include "daemon/round_deltas.h"
#include "compression/pipeline.h"
#include "daemon/state_source.h"
#include "daemon/state_sync.h"
#include "diloco/outer_step.h"
#include "outer/outer_state.h"
#include "transport/frame.h"
#include "transport/mesh.h"

namespace geoloco::daemon {

/// "268435552 bytes in 2.15 s (125.0 MB/s)": what a transfer took, for the log.
std::string transfer_summary(std::uint64_t bytes, double seconds);

/// How an offer brings the asker to its round, for the log: "" (its state),
/// " (as the state of round 2 and rounds 3..6 of the round log)", or
/// " (as rounds 5..6 of the round log, on round 4)".
std::string offer_route(const StateOfferMessage& offer);

/// An accept to send: to `peer`, for its share of a transfer.
struct AcceptTo {
  std::string peer;
  StateAcceptMessage accept;
};

/// What a state frame did to the transfer being received.
struct StateFrameOutcome {
  enum Kind {
    dropped,   ///< no transfer from that peer in progress: nothing changed
    progress,  ///< taken; more to come
    arrived,   ///< the last one: complete, and the anchor's digest matches the offer
    failed,    ///< the transfer is void (`error` says why); the site asks again
  };
  Kind kind = dropped;
  std::string error;
  std::uint64_t round = 0;  ///< arrived: the state's round
  std::string digest;       ///< arrived: its anchor digest (as offered, and checked)
  /// failed: this site's own state was being stepped in place when the
  /// transfer failed, and is no committed round's now (never so with an
  /// honest holder: its entries are checked before the first step).
  bool state_lost = false;
  std::vector<std::string> share_done;  ///< progress: holders whose shares are all in now
  /// progress: accepts to send, for frames no holder was asked for (the
  /// holders that were to take them did not offer) once a share is in.
  std::vector<AcceptTo> accepts;
};

/// This site's own state, for an offer `from_held`: the rounds it carries
/// are stepped on it. `in_place`: where it lies, which saves a copy of the
/// anchor and the momentum (8 bytes a parameter at the peak of a catch-up,
/// 560 GB at 70B) but changes it before install(); the caller allows it
/// only when nothing else reads it meanwhile (no exchange or checkpoint;
/// a trainer's base it copies in `before_step`). Else a copy is stepped
/// and the state is untouched until install().
struct OwnState {
  outer::OuterState* state = nullptr;
  bool in_place = false;
  /// In place: called once the entries are checked, just before the first
  /// step (the caller keeps what it still needs of the state: a trainer's base).
  std::function<void()> before_step;
};

/// How this job steps a committed round's entry (the live round's
/// pipeline and outer step), for offers that carry rounds after their state.
struct RoundSteps {
  std::string config_hash;
  compression::PipelineSpec pipeline;
  diloco::OuterOptimizerOptions outer;
  unsigned threads = 1;  ///< the step's (the site's step_threads)
};

/// A received state put in place.
struct InstalledState {
  std::uint64_t round = 0;
  std::string digest;                ///< its anchor's (checked against the offer's)
  std::string peer;                  ///< who sent it (the first donor)
  std::vector<std::string> senders;  ///< every holder that sent frames of it
  std::uint64_t bytes = 0;           ///< frame bytes received (headers included)
  double seconds = 0;                ///< from this site's request to the state in place
  std::string note;                  ///< the line for the job's log
  std::uint64_t resumed_frames = 0;  ///< frames kept from an earlier donor (0: one donor sent all)
  std::uint64_t base_round = 0;      ///< the round of the state the frames carried (or this site's own)
  std::uint64_t rounds_stepped = 0;  ///< committed rounds stepped on it from the holder's round log
  /// Those entries, when they were stepped on this site's own state (an
  /// offer `from_held`): kept in its own round log, they let it rebuild the
  /// installed state from its own checkpoint, so it need not write one.
  std::vector<RoundDelta> entries;
};

class StateTransfers {
 public:
  using Clock = std::chrono::steady_clock;
  /// `chunk_values`: values per state frame this site sends (tests use small ones).
  StateTransfers(std::string job, std::uint64_t job_id, transport::Mesh& mesh,
                 std::uint64_t chunk_values = kStateChunkValues);

  // --- the holder's side

  /// The offer for `peer`: of what `source` holds (it stays unchanged while
  /// it is sent), whose round is noted so that the peer's accept of it
  /// starts the frames; or, with a `reason` (and no source), of none.
  StateOfferMessage offer(const std::string& peer, std::shared_ptr<const StateSource> source,
                          const std::string& reason = {});
  /// The peer's accept. Returns an empty string when the frames are to be
  /// sent (send()), else why not: not offered to it, or offered for another
  /// round. An offer stays good until the next one to that peer: a later
  /// accept of it (the peer's share changed after this site's frames were
  /// all sent) sends the frames it names.
  std::string accept(const std::string& from, const StateAcceptMessage& accept);
  /// A later accept from a peer this site is sending `accept.round`'s
  /// frames to: its share is `accept.missing` from now on (all, when
  /// empty), or nothing (`stop`, handled with or without a send). False
  /// when no such send is in progress (the accept needs an offer then).
  bool update(const std::string& from, const StateAcceptMessage& accept);
  /// Sends the frames of what was offered to `peer` as round `round` (only
  /// `missing` ones, the accept's, when it names some). Returns the line for
  /// the job's log. Errors: internal (nothing offered), the source's and the mesh's.
  asio::awaitable<Result<std::string>> send(std::string peer, std::uint64_t round,
                                            std::vector<std::uint64_t> missing = {});
  /// Forgets the offers of rounds before `round` (a checkpoint interval
  /// before a new checkpoint: what they hold, an older checkpoint's mapping
  /// or entries the log cut, is released once no send uses it; a late
  /// accept of one is refused and the peer asks again).
  void forget_offers_before(std::uint64_t round);
  /// Peers with an offer that an accept may still take up.
  std::size_t offers_pending() const { return offered_.size(); }

  // --- the asker's side

  /// This site asked for the state at `now`: the wait install() reports
  /// starts here, or at the first request of a transfer that goes on from
  /// another donor (so a resumed transfer reports its whole time).
  void requested(Clock::time_point now) {
    if (!receiving_) requested_at_ = now;
  }
  /// Takes `peer`'s offer into the transfer to receive, and returns the
  /// accepts to send. An offer of the same state as the transfer in
  /// progress joins it: `peer` takes what nobody is asked for and the upper
  /// frames of every share above an equal part (StateReceiver::share_with),
  /// an accept to it and one to each holder whose share shrank; when no holder sends any more (their
  /// frames stopped, release()), that is all that is missing.
  /// Any other offer ends the transfer before and is accepted whole. Errors:
  /// invalid_argument (an offer without state, or one this site cannot hold).
  /// A new transfer with `holders` > 1 asks `peer` for the first
  /// 1/holders of the frames only; the holders that offer next take the
  /// rest (share_with), and what none took goes to the holders sending
  /// once one's share is in (on_frame()'s accepts).
  Result<std::vector<AcceptTo>> receive(const std::string& peer, const StateOfferMessage& offer,
                                        std::size_t holders = 1);
  /// `peer` stopped sending: a stop to it (it may only be slow), and with
  /// `hand_out` its frames split among the holders still sending (the
  /// accepts widening their shares); else they wait for the next one.
  std::vector<AcceptTo> release(const std::string& peer, bool hand_out = true);
  /// A state frame. The last one of an offer that carries rounds after
  /// its state steps them (set_round_steps()'s way), on `own` (this site's
  /// state; see OwnState) when the offer is from it, each to the committed
  /// digest the offer names. Every entry is checked against the offer
  /// before the first step.
  StateFrameOutcome on_frame(const std::string& peer, const transport::FrameHeader& header,
                             std::span<const std::byte> payload, OwnState own = {});
  /// How this job steps an entry; without it, offers that carry entries are refused.
  void set_round_steps(RoundSteps steps) { steps_ = std::move(steps); }
  /// Moves the complete, checked transfer into `state` (job, round, anchor,
  /// momentum, layout: the sender's, else `known` if it fits, else one flat
  /// tensor). After entries stepped in place, `state` must be the state
  /// they were stepped on (its anchor and momentum are the result already).
  /// Errors: internal (nothing complete to install, or another state than
  /// the one stepped in place).
  Result<InstalledState> install(outer::OuterState& state, const Layout& known, Clock::time_point now);
  /// The holders of the transfer whose shares were completed since the
  /// last call (by frames, or by a change of shares that left them none).
  std::vector<std::string> shares_done() {
    return receiving_ ? receiving_->take_share_done() : std::vector<std::string>{};
  }
  /// Forgets the transfer being received, if any.
  void drop() {
    receiving_.reset();
    stepped_.clear();
    stepped_in_place_ = nullptr;
  }
  bool receiving() const { return receiving_.has_value(); }

 private:
  std::string job_;
  std::uint64_t job_id_;
  transport::Mesh& mesh_;
  std::uint64_t chunk_values_;
  struct Offered {
    std::uint64_t round = 0;
    std::shared_ptr<const StateSource> source;
    StateOfferMessage offer;
  };
  std::map<std::string, Offered> offered_;  ///< peer -> what was offered to it
  struct Sending {
    std::uint64_t round = 0;
    std::shared_ptr<FrameWants> wants;
  };
  std::map<std::string, Sending> sending_;  ///< peer -> the frames sent and being sent to it, for its offer's round
  std::optional<StateReceiver> receiving_;
  Clock::time_point requested_at_;
  std::uint64_t kept_frames_ = 0;  ///< the transfer in progress went on from another donor with these
  std::optional<RoundSteps> steps_;
  std::vector<RoundDelta> stepped_;  ///< the complete transfer's entries, stepped on this site's own state
  const outer::OuterState* stepped_in_place_ = nullptr;  ///< the own state they were stepped on, in place
  /// The complete transfer's entries stepped on its base. Errors: why not
  /// (`lost`: the own state was changed in place before the failure).
  Status step_entries(OwnState own, bool& lost);
  /// The accepts that carry changed shares.
  std::vector<AcceptTo> accepts(const StateReceiver::Shares& shares) const;
};

}  // namespace geoloco::daemon
