// The site's side of a round as a state machine without I/O, the twin of
// coordinator_machine.h. JobRun feeds it what happens (the trainer finished
// a phase; the coordinator sent PLAN, COMMITTED or ABORT; an exchange ended;
// a peer offered state, or it arrived; a stop; the time) and carries out the
// actions step() returns, in order: send this, start the exchange of this
// plan, apply this round, release the trainer, ask for the state...
//
// Where the site is (where()):
//
//   awaiting_initial  the coordinator of a new job: the first trainer's
//                     initialization becomes round 1's anchor
//   catching_up       no usable committed state, or behind the job: STATE_SYNC
//                     from a peer; the trainer waits for an anchor
//   idle              holds the committed state of round R (rounds committed);
//                     the trainer trains toward R + 1, or its finished phase
//                     waits for a PLAN (READY is resent until one comes)
//   exchanging        PLAN(R + 1) taken: the all-reduce runs (as a
//                     participant, or as an observer left out of the plan)
//   unwinding         the exchange was aborted or overtaken while its
//                     all-reduce still runs; what comes next waits for it
//   committing        the next anchor's digest is known (COMMIT sent by a
//                     participant); waits for COMMITTED or ABORT
//   applying          COMMITTED named that digest: the step is being applied
//                     (ApplyRound, answered by on_applied()); or it named
//                     the attempt and digest this site voted for before a
//                     restart, and the round is stepped from its round log
//                     (ApplyLoggedRound, answered by on_logged_applied());
//                     the coordinator's messages and requests for the state
//                     that come meanwhile are taken once the step ends
//   finished          the job's last round is applied here
//   ended             stopped, cancelled or failed: nothing changes any more
//
// The rules that keep every site's anchor right, each in one place below:
//   - only committed state is held: a round is applied when COMMITTED names
//     the digest this site computed for it; a different digest, a COMMITTED
//     this site had no part in, or a PLAN beyond R + 1 means catching up;
//   - a trainer is given an anchor once, the first one this site holds
//     (WelcomeTrainer); from then on it moves only through ReleaseTrainer,
//     so it always starts from the anchor of the round it is counted in;
//     when the state moves past an anchor the trainer still trains from,
//     that anchor is kept first (KeepTrainerAnchor): it is the base of the
//     trainer's late Δ;
//   - a new state is installed only while no exchange runs (its buffers are
//     the exchange's input): a need to catch up during an exchange waits in
//     unwinding;
//   - a late phase is carried or dropped by diloco's late-work rule, which
//     the coordinator's weights use too;
//   - a phase is counted once: once its Δ went into an attempt of a round
//     (COMMIT sent, or an exchange that failed or was given up after it
//     began), only a COMMITTED or a journal's answer naming the attempt that
//     committed that round settles it: that attempt holds the phase
//     (counted: the trainer moves on) or not (late work like any other).
//     While the round is known to be committed but not by which attempt (a
//     lost COMMITTED, this site away while later rounds committed), the
//     phase is neither offered again nor dropped, and every site is asked.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "daemon/control_messages.h"
#include "diloco/quorum.h"
#include "diloco/straggler.h"
#include "history/events.h"
#include "job/job_spec.h"

namespace geoloco::daemon {

using diloco::Clock;
using diloco::Millis;

struct ParticipantOptions {
  std::string job;          ///< the job's name
  std::string self;         ///< this site
  std::string coordinator;  ///< the office holder now (may be self; "" during an election)
  std::string named = {};   ///< the job's named coordinator: only its trainer initializes a new job ("": `coordinator`)
  std::vector<std::string> sites;      ///< the job's sites, in the job's order
  std::uint32_t fragments = 1;         ///< Streaming DiLoCo's F (1: plain DiLoCo)
  diloco::StragglerOptions straggler;  ///< carry or drop, max_rounds_late
  std::uint64_t inner_steps = 0;       ///< H as READY reports it (0 with a time-based phase)
  Millis ready_resend_ms{300};         ///< READY again after this long without a PLAN (the heartbeat interval)
  Millis state_retry_ms{1000};         ///< ask for the state again after this long without an answer or a frame
  Millis state_stall_ms{2000};         ///< a transfer without a frame for this long may be replaced by another
};

/// The options of `self`'s machine in `job` (its sites, coordinator,
/// fragments, late-work rule and H), READY resent every `ready_resend` (the
/// site's heartbeat interval).
ParticipantOptions participant_options(const job::JobSpec& job, const std::string& self, Millis ready_resend);

/// A committed state this site holds: R rounds committed, the digest of the anchor of round R + 1.
struct HeldState {
  std::uint64_t round = 0;
  std::string digest;
};

/// The trainer's finished inner phase (TrainerHost's InnerPhase without its replica).
struct PhaseReport {
  std::uint64_t round = 0;     ///< the round it trained for: its anchor is that of `round`
  std::uint32_t fragment = 0;  ///< streaming: the fragment it synced
  std::uint64_t tokens = 0;
  double loss = 0;
};

/// How the job ended on this site.
enum class JobEnd { finished, stopped, cancelled, failed };

namespace participant {
/// Send `message` to `to` (this site included). `now`: past the peer's
/// outbox, for STATE_SYNC's accept, which a (re)joining peer needs at once.
struct Send {
  std::string to;
  ControlMessage message;
  bool now = false;
};
/// Run the all-reduce of `plan`: with this site's Δ (participant), or
/// receiving the average only (observer). Report with on_exchange_done().
struct StartExchange {
  PlanMessage plan;
  bool participant = false;
};
/// The round in hand is over (applied, aborted or void): free its averaged Δ.
struct ForgetExchange {};
/// The trainer was given an older anchor but may not have begun training
/// (no trainer attached, or one waiting for its WELCOME): if so, give it the
/// held anchor for `round` instead, and say so with on_trainer_moved().
struct MoveTrainer {
  std::uint64_t round = 0;
};
/// This site is named in a plan it will not run (it is catching up, has no
/// phase to give, or the plan was superseded before it began): tell the
/// transport to drop that exchange's frames rather than wait for it.
struct DeclineExchange {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
};
/// The exchange in flight is void (the coordinator aborted it, planned a new
/// attempt, or this site must catch up): give it up now, so that it ends at
/// once rather than at its timeout, and the frames of the next operation do
/// not wait behind it (a connection's frames are read in order, control
/// messages and heartbeats among them). It then reports through
/// on_exchange_done() as usual.
struct CancelExchange {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::string why;
};
/// Apply the outer step of the exchanged round for real: its digest is the
/// committed one. Answer with on_applied().
struct ApplyRound {
  CommittedMessage committed;
  bool participant = false;  ///< this site's Δ was in the round (its residual takes the round's encodes)
};
/// Step the committed round from this site's round log: the entry this
/// site wrote before its COMMIT of `attempt`, which `committed` names
/// (the site restarted on the round before, and its vote was counted).
/// Answer with on_logged_applied().
struct ApplyLoggedRound {
  CommittedMessage committed;
  std::uint64_t attempt = 0;
};
/// Before the held state moves: the trainer trains from the anchor held
/// now; keep it, it is the base of the trainer's Δ. `replaced`: a new state
/// replaces the held one (the anchor may be moved out); else the step
/// changes it in place (copy it).
struct KeepTrainerAnchor {
  bool replaced = false;
};
/// Hand the trainer the held anchor and the round after it (finish_round);
/// with `stop` the trainer exits.
struct ReleaseTrainer {
  std::uint64_t next_round = 0;
  bool stop = false;
};
/// Append to the job's history what the machine decided: this site's work
/// left out for good (history::Dropped, whose tokens are also counted in
/// the metrics), or an attempt it was in or waited for abandoned
/// (history::Aborted, the coordinator's ABORT taken).
struct Record {
  history::Event event;
};
/// The first anchor the trainer gets: the held one, for round `round`.
struct WelcomeTrainer {
  std::uint64_t round = 0;
};
/// A new job's anchor is the trainer's initialization: publish it to the trainer.
struct PublishInitial {};
/// Take the state that arrived (on_state_arrived()'s) as the held state.
struct InstallState {};
/// Receive the state `peer` offered for `round`, and accept the offer
/// (past the outbox: now the frames may come). An offer of the state
/// already arriving from other holders joins them: what is missing is
/// split among them (StateTransfers). A receiver that cannot be made is
/// reported with on_state_failed().
struct ReceiveState {
  std::string peer;
  StateOfferMessage offer;
  /// Holders asked to send a share, this one included: the first takes
  /// 1/holders of the frames; the others take the rest when they offer,
  /// or the first once its part is in.
  std::size_t holders = 1;
};
/// `peer` stopped sending its share of the state: it is told to stop, and
/// its frames go to the holders still sending (`hand_out`), or to the next
/// one that offers.
struct ReleaseDonor {
  std::string peer;
  bool hand_out = true;
};
/// Forget the transfer in progress: its frames are dropped from now on.
struct DropTransfer {};
/// Offer the held state to `peer`, or say why there is none (`reason`).
struct OfferState {
  std::string peer;
  std::string reason;                                        ///< empty: offer the state
  std::optional<HeldState> asker = std::nullopt;             ///< the committed state the asker holds, as it said
  std::optional<std::uint64_t> listed_round = std::nullopt;  ///< the last round the asker lists, as it said
};
/// Checkpoint the held state (every checkpoint.every_rounds).
struct SaveCheckpoint {};
/// This site's COMMIT, which must be on disk before it goes (a successor
/// learns from a voter's journal what it voted for): journal `pending`,
/// then send `commit` to `to`, only if the record is durable; when it is
/// not, call on_commit_unjournaled() and send nothing (the machine tries
/// again at the next resend). Once a COMMIT of the attempt was journaled,
/// its resends are plain Sends.
struct JournalCommit {
  PendingCommit pending;
  std::string to;
  CommitMessage commit;
};
/// The job ends here: `end` says how; `checkpoint` whether the held state
/// may be saved (it is committed and current). An exchange still running is
/// cancelled, and its end awaited, before anything it reads is released.
struct EndJob {
  JobEnd end = JobEnd::finished;
  std::string reason;
  bool checkpoint = false;
};
}  // namespace participant

using ParticipantAction =
    std::variant<participant::Send, participant::StartExchange, participant::DeclineExchange,
                 participant::CancelExchange, participant::ForgetExchange, participant::ApplyRound,
                 participant::KeepTrainerAnchor, participant::MoveTrainer, participant::ReleaseTrainer,
                 participant::Record, participant::WelcomeTrainer, participant::PublishInitial,
                 participant::InstallState, participant::ReceiveState, participant::DropTransfer,
                 participant::ReleaseDonor, participant::OfferState, participant::SaveCheckpoint, participant::EndJob,
                 participant::JournalCommit, participant::ApplyLoggedRound>;

class ParticipantMachine {
 public:
  enum class Where {
    awaiting_initial,
    catching_up,
    idle,
    exchanging,
    unwinding,
    committing,
    applying,
    finished,
    ended
  };

  /// `checkpoint`: the committed state loaded from this site's checkpoint,
  /// if it is usable. `journal`: this site's journal's last committed round
  /// (round 0 or none when nothing was committed; a site other than the
  /// coordinator resumes on its own state only from an offer of that round
  /// or later). A
  /// coordinator starts from its checkpoint when it matches the journal
  /// (round and digest), from its trainer's initialization when nothing was
  /// ever committed, and catches up otherwise; every other site catches up.
  /// `checkpoint_every`: rounds between checkpoints (0: none), counted as
  /// the job counts them (streaming: periods of F rounds).
  ParticipantMachine(ParticipantOptions options, std::optional<HeldState> checkpoint, std::optional<HeldState> journal,
                     std::uint64_t checkpoint_every, Clock::time_point now);

  // Inputs. Each returns an error only for a message that makes no sense
  // here (it changes nothing); messages that are merely stale are ignored.
  void on_initial_parameters(const HeldState& initial);
  void on_phase(const PhaseReport& phase);
  /// Errors: invalid_argument (not from the coordinator).
  Status on_plan(const std::string& from, const PlanMessage& plan);
  Status on_committed(const std::string& from, const CommittedMessage& committed);
  Status on_abort(const std::string& from, const AbortMessage& abort);
  /// The exchange of (round, attempt) ended: the next anchor's digest, or why it failed.
  /// `own_fault`: a failure of this site's own (its round log could not be
  /// written), reported as such so that it sits out the next attempts.
  void on_exchange_done(std::uint64_t round, std::uint64_t attempt, const Result<std::string>& digest,
                        bool own_fault = false);
  /// ApplyRound was carried out. An error (the anchor did not come out as
  /// committed, although the same step computed aside did) ends the job
  /// here as failed, without a checkpoint of the broken state.
  void on_applied(const Status& applied);
  /// A peer asks for the state: offered at once when this site holds a
  /// round's; while a step is applied (which an engine may run beside its
  /// event loop), once it is; otherwise refused with why, and offered when
  /// this site comes to hold one.
  void on_state_request(const std::string& from, const StateRequestMessage& request = {});
  void on_state_offer(const std::string& from, const StateOfferMessage& offer, Clock::time_point now);
  /// A state frame of the transfer in progress arrived from `from`.
  void on_state_progress(const std::string& from, Clock::time_point now);
  /// Every frame of `peer`'s share is in (or it was given none): it has
  /// nothing more to send (not stalled).
  void on_state_share_done(const std::string& peer);
  /// `peer`'s offer could not join the transfer arriving (another state of
  /// the same round): it is no holder of this transfer.
  void on_state_helper_refused(const std::string& peer, const std::string& why);
  /// The transfer in progress is complete and its digest checked.
  void on_state_arrived(const HeldState& state);
  /// After MoveTrainer: the trainer now starts from the anchor of `round`.
  void on_trainer_moved(std::uint64_t round);
  /// The transfer in progress broke (its frames, its digest): ask again
  /// later. `state_lost`: it broke while its rounds were stepped on this
  /// site's own state, which holds no committed round now (the whole state
  /// is asked for).
  void on_state_failed(const std::string& why, bool state_lost = false);
  /// The COMMIT this site journaled before it restarted, and whose outcome
  /// its journal does not hold: a COMMITTED naming its attempt and digest,
  /// when it is of the round after the held state (the restart's, or one
  /// installed since), is stepped from the round log (ApplyLoggedRound)
  /// instead of asked of a peer. After a crash
  /// of every site between the votes and the outcome, the voters may be
  /// the only sites that can rebuild the round.
  void on_restored_vote(const PendingCommit& vote);
  /// ApplyLoggedRound was carried out. An error leaves the site catching
  /// up; `state_lost`: the step went wrong midway and the held state is no
  /// round's any more (the state comes whole from a peer).
  void on_logged_applied(const Status& applied, bool state_lost);
  /// The trainer failed for good.
  void on_trainer_failed(const std::string& why);
  /// A site's journal says which attempt committed a round (the answer to
  /// this site's ROUND_QUERY).
  void on_round_outcome(const std::string& from, const RoundOutcomeMessage& outcome);
  /// geoloco cancel, or the daemon stops.
  void on_stop(JobEnd end, const std::string& reason);
  /// The coordinator's office changed (succession.h): what is for the
  /// coordinator goes to `coordinator` from now on ("" while an election is
  /// open: nowhere), READY and COMMIT at once.
  void on_office(const std::string& coordinator);

  struct Actions {
    std::vector<ParticipantAction> actions;    ///< carry out in order
    std::vector<std::string> notes;            ///< for the log
    std::optional<Clock::time_point> wake_at;  ///< call step() again then at the latest
  };
  /// The actions since the last step, and what the time alone brings (READY
  /// again, COMMIT again, asking for the state again).
  Actions step(Clock::time_point now);

  Where where() const { return where_; }
  static std::string_view where_name(Where where);
  /// The committed state held (also a stale one while catching up).
  const std::optional<HeldState>& held() const { return held_; }
  /// The finished phase waiting for a round, if any.
  const std::optional<PhaseReport>& phase() const { return phase_; }
  /// The plan being exchanged or committed.
  const std::optional<PlanMessage>& plan() const { return plan_; }
  /// The highest committed round this site has heard of.
  std::uint64_t known_committed() const { return known_committed_; }
  /// The round whose anchor the trainer trains from (0: it has none yet).
  std::uint64_t trainer_round() const { return trainer_round_; }
  /// What HEARTBEAT says: exchange, ready, inner or idle.
  std::string_view heartbeat_phase() const;
  /// The COMMIT this site sent (as a participant or an observer) for a
  /// round whose outcome it has not learned, or is still applying, if any:
  /// what its VOTE reports, and what its journal keeps until the round's
  /// commit is journaled.
  std::optional<PendingCommit> pending_commit() const;
  /// The journal refused the record of a JournalCommit: its COMMIT was not
  /// sent. Both are tried again at the next resend.
  void on_commit_unjournaled();
  /// The newest plan seen, of any round: (round, attempt).
  std::optional<std::pair<std::uint64_t, std::uint64_t>> newest_plan() const { return newest_seen_; }
  /// The coordinator this site sends to now.
  const std::string& coordinator() const { return options_.coordinator; }

 private:
  enum class After { idle, plan, catch_up };  ///< what follows an unwinding exchange

  bool is_coordinator() const { return options_.self == options_.coordinator; }
  bool streaming() const { return options_.fragments > 1; }
  /// Holds the committed state of the job's last round it knows to apply from.
  bool holds_current() const;
  void act(ParticipantAction action) { actions_.push_back(std::move(action)); }
  void note(std::string line) { notes_.push_back(std::move(line)); }
  void send_coordinator(ControlMessage message) { act(participant::Send{options_.coordinator, std::move(message)}); }

  void start_plan(const PlanMessage& plan);
  void drop_round();
  /// Leaving committing for a later round: the COMMIT sent is pending (what
  /// a vote reports) until its outcome is known.
  void doubt_commit();
  /// `round` committed as `attempt` (a COMMITTED naming it, or a journal's
  /// answer): the held phase is counted if its Δ went into that attempt,
  /// and is late work otherwise.
  void settle(std::uint64_t round, std::uint64_t attempt, const std::string& from);
  /// The round whose committing attempt this site must learn before its
  /// phase can be offered again or dropped: the oldest round known to be
  /// committed that an unsettled attempt of the phase belongs to.
  std::optional<std::uint64_t> doubted_round() const;
  /// ROUND_QUERY to every other site, every resend interval.
  void ask_about(std::uint64_t round, Clock::time_point now, std::optional<Clock::time_point>& wake);
  /// DeclineExchange for a plan that names this site.
  void decline(const PlanMessage& plan);
  void catch_up(const std::string& why);
  void apply(const CommittedMessage& committed);
  /// Whether `committed` is the outcome of restored_vote_ (its round, its
  /// attempt when named, its digest).
  bool commits_restored_vote(const CommittedMessage& committed) const;
  void apply_logged(const CommittedMessage& committed);
  /// A holder offered the state held here (no entries): catching up ends
  /// with no transfer.
  void resume_held(const std::string& from);
  /// Idle on the state of `round` just held: the trainer welcomed or moved
  /// to it, waiting askers offered it; true when that ends the job.
  bool current_at(std::uint64_t round);
  void become_idle();
  void welcome_trainer();
  void release_trainer(bool stop);
  /// Records phase_ as dropped, and why.
  void drop_phase(const std::string& why);
  void finish();
  void end(JobEnd how, const std::string& reason);
  void offer_to_waiting();
  void consider_phase(Clock::time_point now, std::optional<Clock::time_point>& wake);
  void ask_for_state(Clock::time_point now, std::optional<Clock::time_point>& wake);

  ParticipantOptions options_;
  std::uint64_t checkpoint_every_;
  Where where_;
  std::optional<HeldState> held_;
  std::uint64_t known_committed_ = 0;
  std::uint64_t journal_round_ = 0;           ///< this site's journal's last committed round at start
  std::optional<std::uint64_t> final_round_;  ///< the job's last round, once a final COMMITTED named it
  std::uint64_t trainer_round_ = 0;
  std::optional<PhaseReport> phase_;

  // The round in hand (exchanging, unwinding, committing, applying).
  std::optional<PlanMessage> plan_;
  bool participant_ = false;                      ///< this site's Δ is in plan_ (else it observes)
  std::optional<CommittedMessage> early_commit_;  ///< exchanging: COMMITTED came before the exchange ended
  std::string digest_;                            ///< committing: the next anchor's digest
  std::optional<Clock::time_point> commit_sent_at_;
  std::optional<std::pair<std::uint64_t, std::uint64_t>>
      commit_journaled_;                                                  ///< (round, attempt) whose COMMIT is on disk
  After after_ = After::idle;                                             ///< unwinding: what comes next
  std::optional<PlanMessage> next_plan_;                                  ///< unwinding, After::plan
  std::optional<std::pair<std::uint64_t, std::uint64_t>> newest_plan_;    ///< (round, attempt) of the newest PLAN taken
  std::optional<std::pair<std::uint64_t, std::uint64_t>> declined_plan_;  // the last plan declined (round, attempt)
  std::optional<std::pair<std::uint64_t, std::uint64_t>> newest_seen_;    ///< of every PLAN, declined ones too
  std::string catch_up_why_;                                              ///< unwinding, After::catch_up

  /// A COMMIT this site sent (as a participant or an observer) for a round
  /// it then lost track of (a later round was planned or committed before
  /// its COMMITTED or ABORT came): reported in a vote until this site holds
  /// that round's state or learns its outcome, since the old coordinator
  /// may have counted it toward the majority.
  std::optional<PendingCommit> commit_in_doubt_;
  /// The vote this site's journal held at start (on_restored_vote()), of
  /// the round after held_, until that round's outcome is known.
  std::optional<PendingCommit> restored_vote_;
  /// applying: the round stepped from the round log (ApplyLoggedRound).
  std::optional<CommittedMessage> logged_round_;
  /// An end asked for while a step was applied: carried out once it is
  /// (the checkpoint then of the round it gave, or of none if it failed).
  std::optional<std::pair<JobEnd, std::string>> pending_end_;
  /// The coordinator's PLAN, COMMITTED and ABORT that came while a step was
  /// applied, with their sender: taken in order once the step ends (the
  /// state they are judged against is then a round's again).
  std::vector<std::pair<std::string, std::variant<PlanMessage, CommittedMessage, AbortMessage>>> held_messages_;
  void take_held_messages();
  /// Asking which attempt committed doubted_round(): the round asked about,
  /// when last asked, and how often.
  std::uint64_t asked_round_ = 0;
  std::optional<Clock::time_point> doubt_asked_at_;
  std::uint32_t doubt_questions_ = 0;
  /// The phase was counted by this round's commit: the trainer is released
  /// once this site is idle holding that round's state or a later one.
  std::optional<std::uint64_t> counted_in_;
  /// Every attempt the held phase's Δ went into as a participant, until its
  /// round is settled. A successor may complete one of them after this site
  /// saw it fail or aborted (succession.h): only a COMMITTED or a journal's
  /// answer naming the attempt that committed the round settles it.
  std::set<std::pair<std::uint64_t, std::uint64_t>> contributed_;
  /// The job's last round is held, but the phase's round is not settled:
  /// the end waits for the answer (kDoubtQuestionsAtEnd questions at most).
  bool finish_waits_ = false;
  static constexpr std::uint32_t kDoubtQuestionsAtEnd = 20;

  // READY, resent until a PLAN: the round and time of the last one.
  std::uint64_t ready_round_ = 0;
  std::optional<Clock::time_point> ready_at_;

  // STATE_SYNC, asked for while catching up.
  std::string source_;
  std::uint32_t asks_of_source_ = 0;  ///< requests in a row to source_ without a transfer from it
  std::optional<Clock::time_point> asked_at_;
  /// The transfer in progress: the holders sending it, each with its last
  /// frame's time (empty: none, or all of them stopped and the next holder
  /// to offer goes on with what arrived).
  struct Donor {
    Clock::time_point at;  ///< its last frame (or when it joined)
    bool done = false;     ///< its share is all in
    Millis gap{0};         ///< the longest time between two of its frames (the first: since it joined)
    bool heard = false;    ///< a frame of it came
  };
  /// How long the transfer may go without a frame before a holder counts
  /// as stopped: the stall time, or twice the longest gap seen
  /// between one holder's frames (a slow link is not a dead holder); before
  /// any frame, four stall times (the first frames cross the link together).
  Millis quiet_allowance() const;
  std::map<std::string, Donor> donors_;
  bool transferring_ = false;
  std::uint64_t transfer_round_ = 0;
  Clock::time_point progress_at_{};  ///< the transfer's last frame, from any holder
  bool helpers_asked_ = false;       ///< the other sites were asked to help with this transfer
  /// Peers told "no state yet": offered the state as soon as this site holds it.
  std::map<std::string, StateRequestMessage> waiting_for_state_;
  /// A request for the state, naming the committed state this site holds.
  StateRequestMessage state_request() const;
  /// Peers that answered this site's request without state, since it began catching up.
  std::set<std::string> unable_;
  bool told_nobody_ = false;

  std::vector<ParticipantAction> actions_;
  std::vector<std::string> notes_;
};

}  // namespace geoloco::daemon
