// The control plane's messages (docs/design.md §3): what the coordinator and the
// sites say to each other in control frames, as JSON objects with a "type".
// Parsing checks every field (presence, type, range) and refuses the rest
// with a message naming the field, so a malformed message changes no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/layout.h"
#include "common/status.h"

namespace geoloco::daemon {

/// Epochs and attempts (succession.h). An epoch's plans number their
/// attempts from first_attempt_of(epoch): attempts only grow across a
/// failover, so a site that declined an attempt of an old coordinator never
/// mistakes a new plan for it, and every attempt fits the transport's
/// 32-bit operation key.
inline constexpr std::uint64_t kAttemptsPerEpoch = std::uint64_t{1} << 16;
inline constexpr std::uint64_t kMaxEpochs = std::uint64_t{1} << 16;
inline constexpr std::uint64_t kMaxAttempt = kMaxEpochs * kAttemptsPerEpoch - 1;
/// Most round-log entries one state offer may carry, and the largest entry.
inline constexpr std::size_t kMaxOfferedDeltas = 4096;
inline constexpr std::uint64_t kMaxOfferedDeltaBytes = 1ull << 40;
constexpr std::uint64_t first_attempt_of(std::uint64_t epoch) { return epoch * kAttemptsPerEpoch; }
constexpr std::uint64_t epoch_of_attempt(std::uint64_t attempt) { return attempt / kAttemptsPerEpoch; }

/// A site announces itself for a job (at start, or after a restart).
struct JoinMessage {
  std::string job;
  std::uint64_t last_committed_round = 0;  ///< 0: never committed
  std::string anchor_digest;               ///< of that round's anchor, 16 hex digits ("" if none)
};
/// "Still here", every heartbeat interval, to every site of the job: the
/// coordinator counts the sites that are live, and every site watches the
/// acting coordinator (and ranks its possible successors) by them.
struct HeartbeatMessage {
  std::uint64_t round = 0;
  std::string phase;  ///< inner | ready | exchange | idle (no trainer training) | catching_up (fetching the state)
  std::uint64_t epoch = 0;       ///< the sender's epoch
  std::string coordinator = {};  ///< who holds the office of that epoch, as the sender knows ("": not known yet)
  std::uint64_t committed = 0;   ///< the last committed round the sender knows with its digest
};
/// A site finished its inner phase of `round`.
struct ReadyMessage {
  std::uint64_t round = 0;
  std::uint64_t anchor_round = 0;  ///< the round whose anchor it trained from (= round on time, < round when late)
  std::uint64_t tokens = 0;
  std::uint64_t inner_steps = 0;
  double loss = 0;  ///< mean training loss of the phase
};
/// The coordinator's decision: who takes part, with which weights.
struct PlanMessage {
  std::uint64_t round = 0;
  std::vector<std::string> participants;     ///< the all-reduce's order
  std::vector<double> weights;               ///< same order, > 0
  std::vector<std::string> late;             ///< live sites left out (stragglers)
  std::uint64_t attempt = 0;                 ///< 0, then +1 each time round is planned again after an ABORT
  double loss = 0;                           ///< participants' mean training loss, weighted like Δ (for watch)
  std::uint64_t tokens = 0;                  ///< tokens of the round's contributions
  std::vector<std::uint64_t> tokens_each;    ///< each participant's tokens, same order (their sum is `tokens`)
  std::vector<std::uint64_t> anchor_rounds;  ///< the round each participant's work trained for (< round: late)
  std::uint64_t epoch = 0;                   ///< the coordinator's epoch (succession.h)
};
/// A participant computed the outer step of `round` (the plan's `attempt`):
/// the digest of the anchor it would apply.
struct CommitMessage {
  std::uint64_t round = 0;
  std::string anchor_digest;  ///< 16 hex digits
  std::uint64_t attempt = 0;  ///< the PLAN's attempt it answers
};
/// The coordinator saw the same digest from every participant.
struct CommittedMessage {
  std::uint64_t round = 0;
  std::string anchor_digest;
  bool final = false;  ///< the job's stop condition is met: this was its last round
  /// The plan's attempt that committed, when the sender knows it (the
  /// coordinator always does): a site that sent COMMIT for an attempt and
  /// lost track of the round learns from it whether its work was counted.
  std::optional<std::uint64_t> attempt = std::nullopt;
  std::uint64_t epoch = 0;   ///< the coordinator's epoch
  std::uint64_t tokens = 0;  ///< tokens of every round committed through this one (what a successor resumes from)
};
/// The round is abandoned (a participant failed); sites keep their anchor.
struct AbortMessage {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;  ///< the attempt abandoned (after a coordinator restart: the last one planned)
  std::string reason;
  std::uint64_t epoch = 0;  ///< the coordinator's epoch
};
/// A participant could not finish attempt `attempt` of `round` (its
/// exchange failed, or it had nothing to contribute): the coordinator
/// aborts that attempt. A report of an older attempt changes nothing.
struct FailedMessage {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::string reason;
  /// The failure is the site's own (it could not keep the round's Δ on its
  /// disk), not a peer's: the coordinator lets it sit out (coordinator_machine.h).
  bool own = false;
};

/// Federation level (frame job 0): the coordinator hands a validated job
/// to every site of it; a site that was submitted a job it does not
/// coordinate forwards it to the coordinator the same way.
struct JobStartMessage {
  std::string job;   ///< the job's name (as in the YAML)
  std::string file;  ///< the name the user submitted it under, for messages
  std::string yaml;  ///< the job file's text; each site validates it again
};
/// Federation level: the job ends on every site (`geoloco cancel`, or it failed).
struct JobCancelMessage {
  std::string job;
  std::string reason;
};
/// STATE_SYNC, asked: "bring me to your last committed round". A site that
/// holds a committed state says which (`held_round`, `held_digest`): a
/// holder whose round log reaches from there may send only the rounds since.
struct StateRequestMessage {
  std::string job;
  std::optional<std::uint64_t> held_round = std::nullopt;
  std::string held_digest = {};  ///< with held_round: the anchor digest of that round
  /// The last round the asker's status lists (its round log), when it lists
  /// any: the offer carries the holder's records of the rounds after it.
  /// It can be before held_round: a site killed after its journal learned
  /// a round, before it applied and listed it, rebuilds that round from its
  /// own disk but has no record of it.
  std::optional<std::uint64_t> listed_round = std::nullopt;
};

/// A committed round's averaged Δ, as a holder's round log keeps it, that
/// follows the state frames of an offer.
struct StateDeltaOffer {
  std::uint64_t round = 0;
  std::uint64_t bytes = 0;  ///< the entry's size
  std::string hash;         ///< the entry's identity (its first line's xxh3, 16 hex digits)
  std::string digest;       ///< the anchor digest the round gives (the committed one)
  bool operator==(const StateDeltaOffer&) const = default;
};

/// A committed round as the offering site lists it, so that a site given
/// the state lists the rounds it did not apply itself (`geoloco status`).
struct OfferedRound {
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;
  std::vector<std::string> participants;
  std::vector<std::string> late;
  double loss = 0;
  std::uint64_t tokens = 0;
  std::string digest;  ///< the anchor digest the round gave
  bool operator==(const OfferedRound&) const = default;
};
/// Most rounds one state offer lists (the latest).
inline constexpr std::size_t kMaxOfferedRounds = 256;

/// STATE_SYNC, answered: the state of `round` is on offer, unless `reason`
/// says why there is none. The asker takes it with a state_accept, and the
/// state then follows as `state` frames (anchor values, then momentum
/// values, each frame naming its place) spread over all the pair's
/// connections.
struct StateOfferMessage {
  std::string job;
  std::uint64_t round = 0;         ///< rounds committed; the anchor is that of round + 1
  std::string anchor_digest;       ///< xxh3 of the anchor's bytes, 16 hex digits
  std::uint64_t values = 0;        ///< parameters in the anchor (and in the momentum)
  std::uint64_t chunk_values = 0;  ///< values per state frame
  std::string reason;              ///< non-empty: no state is offered, and why
  /// The tensors of the flat anchor, in order (optional: empty when the
  /// offering site knows only the number of values). A joining site needs
  /// them before its trainer says HELLO, e.g. to cut streaming fragments.
  /// On the wire: names and shapes; the offsets follow from the order.
  Layout layout;
  std::uint64_t tokens = 0;                             ///< tokens of every round committed through `round`
  std::optional<std::uint64_t> attempt = std::nullopt;  ///< the attempt that committed `round`, when the offerer knows
  /// xxh3 of the momentum's bytes (optional: "" from a site that does not
  /// send it); with several holders each sending part, the momentum is
  /// checked as a whole like the anchor.
  std::string momentum_digest = {};
  /// The state the frames carry, when it is not `round`'s: round `base_round`
  /// (anchor `base_digest`, momentum `momentum_digest`), and then the
  /// entries `deltas` of rounds base_round + 1 .. round, stepped as the live
  /// rounds were. Absent: the frames carry `round`'s state itself.
  std::optional<std::uint64_t> base_round = std::nullopt;
  std::string base_digest = {};
  /// No state frames: the asker's own state of `base_round` is the base (it
  /// said it holds it), and only the entries follow. No entries
  /// (`base_round` == `round`): the asker holds the offered state already.
  bool from_held = false;
  std::vector<StateDeltaOffer> deltas = {};
  /// The offering site's records of the rounds after the asker's, through
  /// `round` (the latest kMaxOfferedRounds; optional).
  std::vector<OfferedRound> rounds = {};
};

/// STATE_SYNC, taken: "send the state of `round` you offered". Sent once
/// the asker is ready for the frames, so that none can overtake the offer
/// on another connection.
struct StateAcceptMessage {
  std::string job;
  std::uint64_t round = 0;
  /// The frames still wanted, as [begin, end) pairs of frame indices (anchor
  /// frames first, then momentum): a transfer resumed from another holder
  /// after its donor died keeps what it received. Empty: every frame.
  std::vector<std::uint64_t> missing = {};
  /// Send nothing more (a holder let go: the asker takes its frames from
  /// others); `missing` is then empty.
  bool stop = false;
};

/// A COMMIT a site sent for a round whose outcome it has not learned: the
/// old coordinator may have committed it, so a successor must not plan that
/// round anew while it can still be completed.
struct PendingCommit {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::string anchor_digest = {};
  std::uint64_t tokens = 0;  ///< the plan's tokens
  bool participant = true;   ///< sent as a participant (else an observer's acknowledgement)
};
/// What a site knows of the job's rounds, as its VOTE reports it: where a
/// successor resumes (succession.h, recover()).
struct Standing {
  std::uint64_t committed_round = 0;  ///< the last committed round known with its digest (0: none)
  std::string anchor_digest = {};     ///< its anchor's digest
  std::uint64_t tokens = 0;           ///< tokens of every round committed through it
  bool final = false;                 ///< it was the job's last round
  std::optional<std::uint64_t> committed_attempt = std::nullopt;  ///< the attempt that committed it, when known
  std::optional<PendingCommit> pending = std::nullopt;
  std::uint64_t newest_round = 0;  ///< the newest plan seen: its round (0: none) and attempt
  std::uint64_t newest_attempt = 0;
};
/// A site stands for the coordinator's office in `epoch` (succession.h):
/// first for pre-votes (`pre`: nothing is promised or journaled), then for votes.
struct ElectMessage {
  std::uint64_t epoch = 0;
  bool pre = false;
  std::uint64_t committed_round = 0;  ///< the candidate's
};
/// The answer to an ELECT. Granted: the voter's standing (a real vote is
/// journaled first, and the voter refuses older epochs from then on).
/// Refused: why, and the voter's own epoch and coordinator.
struct VoteMessage {
  std::uint64_t epoch = 0;
  bool pre = false;
  bool granted = false;
  std::string reason = {};
  std::string coordinator = {};  ///< refused: the office holder the voter follows ("" if none)
  Standing standing = {};
};

/// "Which attempt committed `round`?", asked of every site by a site
/// holding a phase whose Δ went into an attempt of that round when it
/// learned that the round committed but not by which attempt (its exchange
/// failed, or its COMMITTED was lost, and it was away while later rounds
/// committed). Any site whose journal records the round answers.
struct RoundQueryMessage {
  std::uint64_t round = 0;
};
/// The answer to a ROUND_QUERY, from the answering site's journal: `round`
/// committed as `attempt`, with this anchor digest. A site that does not
/// know the attempt does not answer.
struct RoundOutcomeMessage {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::string anchor_digest;
};

using ControlMessage =
    std::variant<JoinMessage, HeartbeatMessage, ReadyMessage, PlanMessage, CommitMessage, CommittedMessage,
                 AbortMessage, FailedMessage, JobStartMessage, JobCancelMessage, StateRequestMessage, StateOfferMessage,
                 StateAcceptMessage, ElectMessage, VoteMessage, RoundQueryMessage, RoundOutcomeMessage>;

/// What sites say to the coordinator (JOIN, HEARTBEAT, READY, COMMIT,
/// FAILED; every site also watches the heartbeats); ELECT and VOTE are the
/// succession's; everything else is for a site's rounds (PLAN, COMMITTED and
/// ABORT from the coordinator, STATE_SYNC and ROUND_QUERY from any peer) or
/// the federation's.
bool for_coordinator(const ControlMessage& message);
/// What the coordinator still answers once the job has ended on its site: a
/// COMMIT (a site that missed the final COMMITTED would otherwise resend
/// its COMMIT, unanswered, for as long as it runs). The rest is ignored.
bool for_coordinator_after_end(const ControlMessage& message);

/// The JSON text of a message.
std::string encode_control(const ControlMessage& message);
/// Parses and checks a message. Errors: malformed, naming the field.
Result<ControlMessage> decode_control(std::string_view text);
/// "join", "ready", ...
std::string_view control_type_name(const ControlMessage& message);

}  // namespace geoloco::daemon
