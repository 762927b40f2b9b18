// One job on this site: the wiring of its round engine. Every decision is
// the participant machine's (participant_machine.h: where the site is, what
// to send, when to exchange, apply, catch up or release the trainer); JobRun
// carries its actions out against the trainer (trainer/: TrainerHost hosts
// the sync protocol, TrainerProcess runs geoloco-train), the cross-site
// transport (the all-reduce, control and state frames), the outer state and
// the job's files, and feeds back what happened. Who coordinates is the
// succession machine's (succession.h): while this site holds the office it
// also runs the coordinator role (coordinator_role.h); every PLAN, COMMITTED
// and ABORT is admitted by its epoch first. One
// JobRun per running job; everything runs on the daemon's single-threaded
// executor but the writing of a periodic checkpoint. The files: job_run.cpp the lifecycle, messages and the machine's
// actions; job_round.cpp one round's exchange and step; job_checkpoint.cpp
// checkpoints (the periodic ones on a thread of their own, the only thread
// a job starts); job_state.cpp STATE_SYNC (state_transfers.h wired) and status.
//
// A round as this site lives it: the trainer trains from the anchor θ_r; its
// SYNC makes READY; PLAN(r) starts the all-reduce of Δ = θ_r − θ_s
// (participant) or only receives the average (a straggler left out: an
// observer); the outer step is computed aside for the digest → COMMIT;
// COMMITTED(r, digest) applies it for real and the trainer continues from
// θ_{r+1}; ABORT(r) applied nothing, READY again. So the anchor and momentum
// always hold the last committed round: what checkpoints save and what
// STATE_SYNC hands to a (re)joining site.
//
// Streaming DiLoCo (streaming.fragments F > 1): round r syncs only fragment
// fragment_of_round(r, F) (diloco/fragments.h): Δ, the
// all-reduce, the outer step and the residual are that fragment's range, the
// digest is still the whole anchor's. The trainer keeps training while the
// round runs and merges the fragment τ steps later (geoloco-train).
//
// Memory: anchor, momentum and the error-feedback residual (12 bytes per
// parameter) between rounds; during a round also the averaged Δ, held as the
// all-gather's encoded chunks (at most about 1 B/param with q8, 4 raw;
// streaming: of the round's fragment only) and decoded one chunk at a time
// for its norm (with a clip), the digest and the step. This site's own Δ =
// anchor − replica is never whole: the all-reduce makes it one chunk at a
// time (AllReduceRequest::input_base), and encodes it once, through the
// residual, which it changes as it goes. The residual is not backed up: a
// round that is not kept with this site's Δ in it zeroes the residual of
// its range (drop_spent_residual()), as a crash would, instead of encoding
// every chunk a second time once the round is kept. A straggler also keeps the anchor its trainer started
// from, the base of its late Δ, until that work is in; the trainer host
// keeps no copy of its own (it reads trainer_anchor()).
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <asio/thread_pool.hpp>
#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "compression/error_feedback.h"
#include "daemon/control_messages.h"
#include "daemon/control_outbox.h"
#include "daemon/coordinator_role.h"
#include "daemon/job_status.h"
#include "daemon/journal.h"
#include "daemon/journal_records.h"
#include "daemon/succession.h"
#include "job/job_spec.h"
#include "daemon/metrics.h"
#include "daemon/participant_machine.h"
#include "daemon/round_deltas.h"
#include "daemon/round_log.h"
#include "daemon/site_config.h"
#include "daemon/state_transfers.h"
#include "daemon/trainer/trainer_host.h"
#include "daemon/trainer/trainer_process.h"
#include "diloco/chunked_step.h"
#include "common/repeat_filter.h"
#include "history/buffered_history.h"
#include "history/history_file.h"
#include "outer/outer_state.h"
#include "transport/allreduce.h"
#include "common/async_util.h"
#include "transport/mesh.h"

namespace geoloco::daemon {

/// The job id frames carry: xxh3 of the job's name, never 0 (0 is the federation).
std::uint64_t job_id_of(const std::string& name);

struct JobEnvironment {
  asio::any_io_executor executor;
  transport::Mesh* mesh = nullptr;  ///< none: the job can only load and save its files (tests)
  SiteConfig site;
  Metrics* metrics = nullptr;
  std::string trainer_program = "geoloco-train";
};

/// The history's record of round `round` of `plan` as committed (`digest`, `final`)
/// by `coordinator` in `epoch`: its participants and their contributions.
history::Committed committed_event(const PlanMessage& plan, std::uint64_t round, std::uint32_t fragment,
                                   const std::string& coordinator, std::uint64_t epoch, const std::string& digest,
                                   bool final);

class JobRun : public std::enable_shared_from_this<JobRun> {
 public:
  /// Prepares the job's folder (<data_dir>/jobs/<name>: job.yaml, status,
  /// checkpoint, journal, round log, trainer log, eval log). A checkpoint that cannot
  /// be read is set aside (checkpoint.safetensors.damaged) and the state
  /// comes from a peer. Errors: invalid_argument (this site is not in the
  /// job; a checkpoint of another configuration under the same name), io.
  static Result<std::shared_ptr<JobRun>> create(JobEnvironment env, job::JobSpec spec, std::string yaml,
                                                std::string file);
  ~JobRun();

  /// Opens the trainer's socket, starts the trainer (built-in) and the engine.
  Status start();
  /// A job-level control or state frame from a peer. Errors refuse the frame.
  Status on_frame(const std::string& peer, const transport::FrameHeader& header, std::span<const std::byte> payload);
  /// The mesh's control connection to `peer` closed and none replaced it: the
  /// coordinator role (if this site holds the office) and the succession
  /// count it silent at once, not a heartbeat timeout later.
  void on_link_lost(const std::string& peer, const Status& why);
  /// The control connection to `peer` is up (again): queued control messages to it go now.
  void on_link_up(const std::string& peer);
  /// Ends the job on this site: the round in flight is abandoned (nothing of
  /// it was applied), the trainer is stopped, the state checkpointed. `state`
  /// is cancelled (geoloco cancel) or stopped (the daemon stops; the job
  /// resumes when it starts again). Returns once the job has ended.
  asio::awaitable<void> stop(JobState state, std::string reason);

  nlohmann::json status() const;
  const std::vector<RoundRecord>& records() const { return rounds_->records(); }
  /// Eval loss by anchor round, from the trainer's eval log.
  std::map<std::uint64_t, double> eval_losses() const;
  /// Wakes at every change of records or state.
  asio::awaitable<void> wait_changed() { co_await changed_.wait(); }
  JobState state() const { return job_state_; }
  /// The coordinator's office this site follows (epoch 0, the named coordinator, before the job starts).
  Office office() const { return succession_ ? succession_->office() : Office{0, spec_.coordinator}; }
  bool done() const;
  const job::JobSpec& spec() const { return spec_; }
  std::uint64_t id() const { return id_; }
  const std::string& job_dir() const { return dir_; }
  const std::string& message() const { return message_; }

 private:
  JobRun(JobEnvironment env, job::JobSpec spec, std::string yaml, std::string file, std::string dir);
  const std::string& self() const { return env_.site.name; }
  bool is_coordinator() const { return succession_ && succession_->acting(); }
  /// The office holder ("" while an election is open).
  std::string coordinator() const { return succession_ ? succession_->office().coordinator : spec_.coordinator; }
  bool streaming() const { return spec_.fragments() > 1; }
  void note(const std::string& line);
  /// Appends to the job's history (history/): what check-history reads.
  void record(const history::Event& event);
  void set_state(JobState state, const std::string& message);

  // Messages (job_run.cpp).
  void send(const std::string& site, const ControlMessage& message);
  /// Sends at once, not behind the peer's queue (ControlOutbox::send_now):
  /// STATE_SYNC's offer and accept.
  void send_now(const std::string& site, const ControlMessage& message);
  /// The header of this job's control frames.
  transport::FrameHeader control_header() const;
  void deliver(const std::string& from, const ControlMessage& message);
  void on_state_frame(const std::string& peer, const transport::FrameHeader& header,
                      std::span<const std::byte> payload);

  // The engine: the participant machine's steps carried out (job_run.cpp).
  void drive();
  void execute(ParticipantAction& action);
  // The coordinator's office (job_office.cpp).
  /// What this site's VOTE reports: its journal's last committed round, the COMMIT in doubt, the newest plan.
  Standing standing() const;
  /// Runs the succession machine's step; false when it had nothing to do.
  bool step_succession();
  /// Carries out a succession action; false: a record could not be journaled (what follows it is not sent).
  bool execute(SuccessionAction& action);
  /// Opens the coordinator role for the office this site holds (a successor: from `recovery`) and runs it.
  Status start_role(std::optional<Recovery> recovery, bool run_now, std::set<std::string> live = {});
  void stop_role(const std::string& why);
  /// PLAN, COMMITTED and ABORT: admitted by their epoch (the succession machine's), or refused and counted.
  bool admit(const std::string& from, const ControlMessage& message);
  /// The COMMIT about to be sent: its round and attempt journaled first (a
  /// successor must hear of it). false: it could not be, and is not sent.
  bool journal_pending_commit(const PendingCommit& p);
  /// The machine has no COMMIT in doubt any more: journaled too.
  void journal_pending_cleared();
  /// A round this site applied or installed: its journal's `committed` record.
  void journal_committed(const CommittedRecord& record);
  /// A site of the job asks which attempt committed a round: answered when
  /// this site's journal records it with its attempt, else not at all.
  void answer_round_query(const std::string& from, const RoundQueryMessage& query);
  asio::awaitable<void> run();
  asio::awaitable<void> ticker();
  /// Writes the history's waiting records again until they are on disk.
  asio::awaitable<void> retry_history();
  // The trainer (job_trainer.cpp).
  /// Opens the trainer host (the sync socket, the job's phase plan; a
  /// trainer welcomed first starts at `first_round`, and may be asked for the
  /// job's initialization) and, unless the trainer is external, starts the
  /// trainer process.
  Status start_trainer(std::uint64_t first_round, bool ask_for_initial);
  /// Hands each phase the trainer reports to the participant machine.
  asio::awaitable<void> watch_trainer();
  asio::awaitable<void> end_job(participant::EndJob end);
  /// Wakes every kLoopProbe and keeps in loop_busy_ how late it woke: the
  /// longest the event loop was held (RoundCosts::loop_busy_seconds).
  asio::awaitable<void> probe_loop();
  static constexpr Millis kLoopProbe{50};

  // One round (job_round.cpp).
  asio::awaitable<void> exchange(PlanMessage plan, bool participant);
  /// The next anchor's digest from the exchanged Δ (its clip scale kept in delta_clip_scale_).
  Result<std::string> exchange_digest();
  /// Frees the exchanged Δ (and its clip scale).
  void forget_delta();
  /// Zeroes the residual's range an exchange encoded through when its round
  /// was not kept with this site's contribution (an ABORT, a round
  /// committed without it, a state installed instead): the encodes took
  /// their rounding out of it, and the same Δ will be sent again.
  void drop_spent_residual();
  /// The machine holds a round whose outcome is open (exchanging,
  /// unwinding, committing, applying): the residual's spent range may still
  /// be kept with it.
  bool round_in_hand() const;
  /// exchange_digest(), while the exchanged round's averaged Δ is made
  /// durable in the round log on another thread (round_deltas.h), both done
  /// before this site votes. `kept`: the round log's error (io: no vote then).
  Result<std::string> digest_while_keeping(const PlanMessage& plan, Status& kept);
  /// Applies the exchanged round's outer step and records the round; the
  /// step runs on passes_, off the event loop, while the machine holds what
  /// would read the state (it is applying) and the trainer's host is paused.
  /// Errors: the step's, and mismatch (the anchor is not the committed one).
  asio::awaitable<Status> apply_round(CommittedMessage committed, bool participant);
  /// apply_round(), its outcome given to the machine.
  asio::awaitable<void> apply_committed(CommittedMessage committed, bool participant);
  /// The step is over: the trainer's host answers again.
  void resume_after_step();
  /// Steps round `committed` from the round log's entry this site wrote
  /// before its COMMIT of `attempt` (a vote from before a restart), and
  /// records the round as apply_round() does. Errors: mismatch (no such
  /// entry or plan; or the step gave another anchor, and then
  /// `state_lost`: the state is dropped), the entry's read and decode.
  asio::awaitable<Status> apply_logged_round(CommittedMessage committed, std::uint64_t attempt, bool& state_lost);
  /// apply_logged_round(), its outcome given to the machine.
  asio::awaitable<void> apply_logged(CommittedMessage committed, std::uint64_t attempt);
  /// This site's state was stepped to no committed round: it is dropped
  /// (anchor, momentum, residual, the checkpoint offered from), and the
  /// whole state comes from a peer.
  void drop_lost_state();
  /// What `record` says of round `round` of `plan` committed with anchor
  /// `digest`: the round, its fragment, participants, loss and tokens.
  void describe_round(RoundRecord& record, const PlanMessage& plan, std::uint64_t round,
                      const std::string& digest) const;
  /// A committed round's record (its timings and bytes in `record`),
  /// history event and journal record, and its line in the log.
  void keep_committed_round(const CommittedMessage& committed, const PlanMessage& plan, const std::string& coordinator,
                            RoundRecord record);
  Result<std::string> next_anchor_digest(float scale);
  /// The values round `round` syncs: the whole model, or with streaming the
  /// fragment fragment_of_round(round) cut from the layout as the trainer's
  /// table is. Errors: invalid_argument (a layout that cannot be cut so).
  Result<inner::protocol::FragmentDesc> round_range(std::uint64_t round) const;
  Result<float> clip_scale_of_delta();
  /// The threads of a pass over the model (the site's step_threads), the
  /// CPU of the others added to `cpu`; `cancellable`: the exchange's pass,
  /// which CancelExchange and the job's end give up (never the step).
  diloco::PassThreads pass_threads(double& cpu, bool cancellable) const;

  // STATE_SYNC and checkpoints (job_state.cpp).
  void offer_state(const std::string& peer, const std::string& reason, const std::optional<HeldState>& asker,
                   std::optional<std::uint64_t> listed_round);
  void on_state_accept(const std::string& from, const StateAcceptMessage& accept);
  void receive_state(const std::string& peer, const StateOfferMessage& offer, std::size_t holders);
  /// `peer` stopped sending its share: its frames go to the holders still sending.
  void release_donor(const std::string& peer, bool hand_out);
  void send_accepts(const std::vector<AcceptTo>& accepts);
  void install_state();
  // Checkpoints (job_checkpoint.cpp).
  /// Writes a checkpoint of the state held now and waits for it (after
  /// waiting for one being written). Errors: outer::save_checkpoint's.
  Status save_checkpoint();
  /// Starts a checkpoint of the state held now on its own thread, from
  /// views of the anchor, momentum and residual, which nothing changes until
  /// it is done: an exchange waits for it before it encodes
  /// (checkpoint_written()), anything else that changes them calls
  /// finish_checkpoint() first. One at a time: while one is being written,
  /// the next is skipped (said once), the round log covering the rounds.
  void start_checkpoint();
  /// Waits for the checkpoint being written, if any, and keeps what it did.
  void finish_checkpoint();
  /// Resumes once no checkpoint is being written; the seconds it waited.
  asio::awaitable<double> checkpoint_written();
  /// What a saved checkpoint changes: the file offered, the costs of its
  /// round, the metrics, the round log cut.
  void after_checkpoint(const Status& saved, std::uint64_t round, double seconds, double cpu_seconds);
  /// Errors: invalid_argument (a checkpoint of another configuration).
  Status load_checkpoint();
  /// The checkpoint's state stepped through the round log up to the
  /// journal's last committed round (round_replay.h), before the machine
  /// starts: what this site holds after a crash, from its disk alone.
  void replay_round_log();
  /// The rounds replay_round_log() rebuilt on the checkpoint, with their committed digests (for the history).
  std::vector<history::RoundDigest> rebuilt_;
  /// A journal write refused: counted (geoloco_journal_write_failures_total)
  /// and, when `status_line` is given, shown by status while the job runs.
  void journal_refused(const std::string& status_line);
  /// A journal write went through: a refusal status showed is over.
  void journal_written();
  void record_rebuilt_rounds(std::uint64_t from, std::uint64_t to, const JournalSummary& journal);
  void list_installed_rounds(std::uint64_t round, const std::string& digest, const std::string& peer);
  bool keep_installed_entries(const InstalledState& installed, std::uint64_t tokens);
  bool rebuilds_from_disk(std::uint64_t round);
  /// geoloco_round_log_bytes: what the round log holds on disk now.
  void show_round_log_bytes();

  JobEnvironment env_;
  job::JobSpec spec_;
  std::string yaml_;
  std::string file_;
  std::string dir_;
  std::uint64_t id_;
  std::string config_hash_;
  JobState job_state_ = JobState::starting;
  std::string message_;
  Signal changed_;
  /// The checkpoint being written on its own thread (start_checkpoint()).
  struct CheckpointWrite {
    std::thread thread;
    std::uint64_t round = 0;
    Status status;  ///< set by the thread before it ends
    double seconds = 0, cpu_seconds = 0;
  };
  std::unique_ptr<CheckpointWrite> checkpoint_write_;
  std::uint64_t checkpoints_skipped_ = 0;

  /// The site's journal of the job (journal.h): the coordinator role's
  /// decisions, and what any site needs to take the office.
  std::optional<Journal> journal_;
  std::optional<SuccessionMachine> succession_;
  std::shared_ptr<CoordinatorRole> role_;           ///< while this site holds the office
  std::optional<PendingCommit> journaled_pending_;  ///< the pending COMMIT this run journaled
  std::optional<PendingCommit> restored_pending_;   ///< the one the journal held at start (its memory is gone)
  /// What the offers of a state being received said, by the round offered
  /// (an offer of another round, later dropped, must not lend its figures):
  /// the tokens through that round, and the attempt that committed it.
  std::map<std::uint64_t, std::uint64_t> receiving_tokens_;
  std::map<std::uint64_t, std::uint64_t> receiving_attempt_;
  std::map<std::uint64_t, OfferedRound> receiving_rounds_;  ///< and the rounds its holders listed
  std::unique_ptr<TrainerHost> host_;
  std::unique_ptr<TrainerProcess> process_;
  /// Where this site is in the job's rounds; every decision is its.
  std::optional<ParticipantMachine> machine_;
  std::optional<HeldState> checkpoint_;     ///< the loaded checkpoint's round and digest
  std::optional<asio::steady_timer> wake_;  ///< the ticker's sleep, cut short when the machine wants a step sooner
  std::optional<Clock::time_point> wake_at_;
  bool driving_ = false;  ///< drive() is running: a nested call only asks it to look again
  bool drive_again_ = false;

  outer::OuterState state_;       ///< the held state (round = rounds committed)
  bool anchor_committed_ = true;  ///< false after a failed apply, until a state is installed
  /// The anchor the trainer trains from when it is older than state_'s (a
  /// straggler, or a site that caught up while its trainer trained); empty
  /// when the trainer trains from state_.anchor.
  std::vector<float> late_anchor_;
  /// late_anchor_ was copied just before rounds sent by a peer were stepped
  /// in place on state_ (the trainer's base), ahead of the machine's
  /// KeepTrainerAnchor for that install, which it stands for.
  bool base_kept_for_install_ = false;
  std::span<const float> trainer_anchor() const {
    return late_anchor_.empty() ? std::span<const float>(state_.anchor) : std::span<const float>(late_anchor_);
  }
  std::unique_ptr<compression::ErrorFeedback> feedback_;

  std::optional<InnerPhase> phase_;  ///< the trainer's finished phase (its replica), until released
  Clock::time_point phase_started_, phase_at_, plan_at_;
  std::optional<double> phase_compute_seconds_,
      phase_loop_seconds_;  ///< the last phase's, as its trainer measured them

  // The exchange of plan_ (one at a time: the machine starts the next only
  // after this one ended).
  PlanMessage plan_;
  bool exchange_running_ = false;  ///< its all-reduce runs: it reads the replica and the anchor
  /// exchange() has begun and not returned; after its all-reduce, its digest
  /// pass and round-log write run on passes_ (they read the anchor, the
  /// momentum and delta_).
  bool exchange_active_ = false;
  /// Gives up the exchange's digest pass (an ABORT, catching up, the job's end).
  std::atomic<bool> pass_cancel_{false};
  bool ending_ = false;  ///< end_job() has begun: an exchange still waiting starts nothing
  /// apply_round()'s step runs on passes_: it writes the anchor and momentum and reads delta_.
  bool step_running_ = false;
  transport::AllReduceRequest request_;
  /// The residual's range an exchange encoded through (changing it) whose
  /// round has not been kept with this site's contribution: cleared before
  /// the residual is used again (drop_spent_residual()).
  std::optional<std::pair<std::uint64_t, std::uint64_t>> residual_spent_;
  /// The averaged Δ of plan_.round's values (delta_offset_ onwards), kept as
  /// the all-gather's encoded chunks and decoded again piece by piece.
  transport::EncodedOutput delta_;
  /// delta_'s clip scale, once exchange_digest() computed it.
  std::optional<float> delta_clip_scale_;
  std::uint64_t delta_offset_ = 0;
  std::uint64_t round_bytes_sent_ = 0, round_bytes_received_ = 0;
  RoundCosts round_costs_;             ///< the round in flight's, from its exchange to its record
  double loop_busy_ = 0;               ///< probe_loop()'s longest lateness since the round's exchange began
  Clock::time_point loop_busy_since_;  ///< then: a probe armed before counts for the round before

  /// STATE_SYNC's offers and the transfer being received.
  std::optional<StateTransfers> transfers_;
  /// The checkpoint file mapped for the transfers that send it (state_source.h);
  /// a new checkpoint drops it here, the sends that use it keep it.
  std::shared_ptr<const MappedCheckpoint> mapped_checkpoint_;
  /// The checkpoint file this site wrote or loaded and checked (MappedCheckpoint::open skips its anchor pass).
  std::optional<FileIdentity> checkpoint_checked_;
  /// What to send `asker` (which holds `held` when it says so): the
  /// cheapest source of the committed state this site holds. Errors: why
  /// there is none.
  Result<std::shared_ptr<const StateSource>> state_source(const std::optional<HeldState>& asker);

  std::optional<history::HistoryFile> history_;
  std::optional<history::BufferedHistory> buffered_history_;
  RepeatFilter repeats_;         ///< a line repeated within 30 s is counted, not logged again
  bool ended_recorded_ = false;  ///< the history has this run's `ended`
  /// The rounds this site committed, the job's whole run (rounds.jsonl, across restarts).
  std::optional<RoundLog> rounds_;
  /// The averaged Δ of each round this site voted for since its checkpoint (deltas/).
  std::optional<RoundDeltas> round_deltas_;
  std::shared_ptr<ControlOutbox> outbox_;  ///< to peers, in order per peer
  /// The thread the exchange's digest pass runs on, off the event loop (the
  /// pass's own helpers are its own: diloco/chunk_pass.h). Declared last, so
  /// destroyed first: a pass still running is joined before what it reads
  /// (the state, delta_, the round log) goes.
  asio::thread_pool passes_{1};
};

}  // namespace geoloco::daemon
