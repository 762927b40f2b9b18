// One round of a job on this site (job_run.h), as the participant machine
// orders it: the exchange (Δ = anchor − replica through the all-reduce, or
// the average only for a late site) and the outer step computed aside for
// the COMMIT digest; then, once COMMITTED names that digest, the step
// applied for real and the residual stored. With streaming, the round's
// values are one fragment (round_range()). The rest of the engine is
// job_run.cpp.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <cmath>
#include <future>
#include <thread>
#include <spdlog/spdlog.h>

#include "common/cpu_time.h"
#include "common/buffer.h"
#include "common/digest.h"
#include "common/off_loop.h"
#include "daemon/job_run.h"
#include "daemon/job_util.h"
#include "daemon/round_replay.h"
#include "daemon/site_metrics.h"
#include "inner/protocol/layout.h"
#include "diloco/exchange.h"
#include "diloco/chunked_step.h"
#include "transport/allreduce.h"

namespace geoloco::daemon {

history::Committed committed_event(const PlanMessage& plan, std::uint64_t round, std::uint32_t fragment,
                                   const std::string& coordinator, std::uint64_t epoch, const std::string& digest,
                                   bool final) {
  history::Committed h;
  h.round = round;
  h.attempt = plan.attempt;
  h.fragment = fragment;
  h.coordinator = coordinator;
  h.epoch = epoch;
  h.participants = plan.participants;
  h.late = plan.late;
  for (std::size_t i = 0; i < plan.participants.size(); ++i)
    h.contributions.push_back(
        {plan.participants[i], plan.anchor_rounds.at(i), plan.tokens_each.at(i), plan.weights.at(i)});
  h.digest = digest;
  h.final = final;
  return h;
}

using Clock = std::chrono::steady_clock;

asio::awaitable<void> JobRun::exchange(PlanMessage plan, bool participant) {
  auto keep = shared_from_this();
  // end_job() waits for every exchange begun to end, wherever it is.
  exchange_active_ = true;
  struct Ended {
    JobRun& run;
    ~Ended() {
      run.exchange_active_ = false;
      run.changed_.notify_all();
    }
  } ended{*this};
  round_costs_ = RoundCosts();
  loop_busy_ = 0;
  loop_busy_since_ = Clock::now();
  pass_cancel_ = false;
  // The residual a checkpoint being written reads is encoded through below.
  round_costs_.checkpoint_wait_seconds = co_await checkpoint_written();
  if (ending_) {  // the job ended while this exchange waited: it reads nothing more
    machine_->on_exchange_done(plan.round, plan.attempt, Status(Err::io, "the job is ending"), false);
    co_return;
  }
  {
    ThreadCpuTimer timer(round_costs_.feedback);
    drop_spent_residual();  // an earlier attempt's encodes that were not kept
  }
  plan_ = plan;
  plan_at_ = Clock::now();
  exchange_running_ = true;
  auto finish = [&](const Result<std::string>& digest, bool own_fault = false) {
    exchange_running_ = false;  // nothing of the trainer's replica is read any more
    if (!digest.ok()) forget_delta();
    machine_->on_exchange_done(plan.round, plan.attempt, digest, own_fault);
    drive();
    changed_.notify_all();
  };
  auto range = round_range(plan.round);
  if (!range.ok()) {
    finish(range.status());
    co_return;
  }
  const std::size_t n = range->length;
  delta_offset_ = range->offset;
  std::span<const float> base, replica;  // Δ = base − replica, made chunk by chunk by the all-reduce
  if (participant) {
    base = trainer_anchor();
    replica = phase_ ? phase_->replica : std::span<const float>();
    if (base.size() != state_.anchor.size() || replica.size() != n || !phase_ || phase_->offset != delta_offset_) {
      finish(GEOLOCO_ERROR(Err::internal, "the trainer's replica holds ", replica.size(), " values at ",
                           phase_ ? phase_->offset : 0, ", round ", plan.round, " syncs ", n, " at ", delta_offset_,
                           " of the anchor's ", base.size()));
      co_return;
    }
    base = base.subspan(delta_offset_, n);
  }
  forget_delta();
  delta_.values = n;
  transport::AllReduceRequest& request = request_;
  request = transport::AllReduceRequest();
  request.key = {plan.round, static_cast<std::uint32_t>(plan.attempt)};
  request.participants = plan.participants;
  request.weights = plan.weights;
  request.observers = plan.late;
  request.pipeline = spec_.compression;
  request.input = replica;
  request.input_base = base;
  request.encoded_output = &delta_;
  request.feedback = participant ? feedback_.get() : nullptr;
  request.feedback_offset = delta_offset_;
  // Each chunk is encoded once, through the residual, which keeps what the
  // encode dropped; if the round is not kept with this Δ in it, that range
  // of the residual is zeroed before it is used again.
  if (request.feedback) residual_spent_.emplace(delta_offset_, n);
  request.seed = spec_.seed;
  request.timeout = std::chrono::milliseconds(4 * env_.site.heartbeat_timeout_ms);
  auto result = co_await transport::all_reduce(*env_.mesh, request);
  exchange_running_ = false;
  if (!result.ok()) {
    finish(result.status());
    co_return;
  }
  round_bytes_sent_ = result->bytes_sent;
  round_bytes_received_ = result->bytes_received;
  round_costs_.encode = result->encode_cpu_seconds;
  round_costs_.decode_average = result->reduce_cpu_seconds;
  round_costs_.transfer = std::max(0.0, result->cpu_seconds - result->encode_cpu_seconds - result->reduce_cpu_seconds);
  round_costs_.values = n;
  round_costs_.averaged_values_decoded = result->gathered_values_decoded;
  round_costs_.own_values = participant ? n : 0;
  round_costs_.values_encoded = result->values_encoded;
  // On disk before the vote: a round commits only with a majority holding
  // its outcome, so a committed round survives on every site that voted.
  // The digest pass and the write run off the event loop (a minute of work
  // at 70B parameters, while heartbeats and peers must still be answered);
  // meanwhile the machine is still exchanging, so nothing moves the anchor,
  // the momentum or delta_ under them.
  Status kept;
  Result<std::string> digest = Status(Err::internal, "the digest pass did not run");
  try {
    digest = co_await off_loop(passes_, [&] { return digest_while_keeping(plan, kept); });
  } catch (const std::exception& e) {  // (a thread that could not be made): no vote, and the machine hears why
    digest = Status(Err::internal, cat("the digest pass: ", e.what()));
  }
  show_round_log_bytes();
  if (digest.ok() && !kept.ok()) {
    finish(kept, true);  // this site's own failure: it sits out the next attempts
    co_return;
  }
  finish(digest);
}

Result<std::string> JobRun::digest_while_keeping(const PlanMessage& plan, Status& kept) {
  if (!round_deltas_) return exchange_digest();
  // The round log's entry is written on a thread of its own while this one
  // computes the digest (which the entry's last line holds): the disk's
  // time overlaps the digest pass's instead of following it. Both only read
  // the averaged Δ's chunks.
  std::promise<Result<std::string>> digest_promise;
  std::shared_future<Result<std::string>> digest_known = digest_promise.get_future().share();
  double cpu = 0, wall = 0;
  std::thread writer([&] {
    const auto start = Clock::now();
    ThreadCpuTimer timer(cpu);
    kept = round_deltas_->append(
        plan.round, plan.attempt, delta_offset_, [&] { return digest_known.get(); }, delta_);
    wall = seconds_between(start, Clock::now());
  });
  Result<std::string> digest = Status(Err::internal, "the digest pass did not finish");
  try {
    digest = exchange_digest();
  } catch (...) {  // (an allocation that failed): the writer must not wait for ever
    digest_promise.set_value(digest);
    writer.join();
    throw;
  }
  digest_promise.set_value(digest);
  const auto waited_from = Clock::now();
  writer.join();
  round_costs_.round_log += cpu;
  round_costs_.round_log_seconds = wall;
  round_costs_.round_log_wait_seconds = seconds_between(waited_from, Clock::now());
  if (!kept.ok() && digest.ok())
    kept = Status(kept.code(),
                  cat("round ", plan.round,
                      "'s averaged Δ cannot be kept on disk, so this site does not vote for it: ", kept.message()));
  return digest;
}

Result<std::string> JobRun::exchange_digest() {
  Result<float> scale = 0.0f;
  {
    ThreadCpuTimer timer(round_costs_.clip);
    scale = clip_scale_of_delta();
  }
  if (!scale.ok()) return scale.status();
  delta_clip_scale_ = *scale;  // apply_round() steps with it: one pass over Δ fewer
  ThreadCpuTimer timer(round_costs_.digest);
  return next_anchor_digest(*scale);
}

bool JobRun::round_in_hand() const {
  if (!machine_) return false;
  using W = ParticipantMachine::Where;
  const W w = machine_->where();
  return w == W::exchanging || w == W::unwinding || w == W::committing || w == W::applying;
}

void JobRun::drop_spent_residual() {
  if (!residual_spent_ || exchange_running_) return;
  const auto [offset, length] = *residual_spent_;
  residual_spent_.reset();
  if (!feedback_) return;
  feedback_->clear_range(offset, length);
  spdlog::info(
      "[{}] the residual of values [{}, {}) starts again from zero: the round it was encoded for was not "
      "kept with this site's pseudo-gradient",
      spec_.name, offset, offset + length);
}

void JobRun::forget_delta() {
  delta_.clear();
  delta_clip_scale_.reset();
}

diloco::PassThreads JobRun::pass_threads(double& cpu, bool cancellable) const {
  return {env_.site.pass_threads(), &cpu, cancellable ? &pass_cancel_ : nullptr};
}

Result<float> JobRun::clip_scale_of_delta() {
  return diloco::chunked_clip_scale(delta_.chunk_list(), spec_.outer.outer.clip_norm,
                                    pass_threads(round_costs_.clip, true));
}

Result<std::string> JobRun::next_anchor_digest(float scale) {
  auto digest =
      diloco::stepped_anchor_digest(state_.anchor, state_.momentum, delta_offset_, delta_.values, delta_.chunk_list(),
                                    spec_.outer.outer, scale, pass_threads(round_costs_.digest, true));
  if (!digest.ok()) return digest.status();
  return digest_hex(*digest);
}

Result<inner::protocol::FragmentDesc> JobRun::round_range(std::uint64_t round) const {
  const std::uint64_t n = state_.anchor.size();
  if (!streaming()) return inner::protocol::FragmentDesc{0, n, round};
  // The same cut as the trainer's fragment table (TrainerHost: split_fragments of its layout).
  const std::uint64_t offset = layout_values(state_.layout);
  auto table = inner::protocol::split_fragments(state_.layout, spec_.fragments(), round);
  if (!table.ok()) return Status(table.status().code(), cat("streaming.fragments: ", table.status().message()));
  GEOLOCO_RETURN_IF(offset != n, Err::internal, "the layout holds ", offset, " values, the anchor ", n);
  return (*table)[diloco::fragment_of_round(round, spec_.fragments())];
}

asio::awaitable<void> JobRun::apply_committed(CommittedMessage c, bool participant) {
  auto keep = shared_from_this();
  // The machine hears how the step went whatever happens: applying, it
  // holds the job's end and every message of the office until it does.
  Status applied = Status(Err::internal, "the outer step did not finish");
  try {
    applied = co_await apply_round(std::move(c), participant);
  } catch (const std::exception& e) {  // (a thread that could not be made, an allocation): the state is no round's
    anchor_committed_ = false;
    applied = Status(Err::internal, cat("the outer step: ", e.what()));
  } catch (...) {
    anchor_committed_ = false;
    applied = Status(Err::internal, "the outer step stopped on an unknown exception");
  }
  resume_after_step();
  machine_->on_applied(applied);
  drive();
}

void JobRun::resume_after_step() {
  if (!std::exchange(step_running_, false)) return;
  if (host_) host_->resume();  // what the trainer sent meanwhile is answered from the stepped anchor
}

asio::awaitable<Status> JobRun::apply_round(CommittedMessage c, bool participant) {
  auto started = Clock::now();  // the event loop is held from here to the step, and after it to the round's record
  finish_checkpoint();          // (the exchange waited for it already)
  // The scale the COMMIT's digest was computed with (the same function of
  // the same Δ, so the same bits); computed again only if it is not at hand.
  const Result<float> scale = delta_clip_scale_ ? Result<float>(*delta_clip_scale_) : clip_scale_of_delta();
  // The round is kept: this site's residual takes what its encodes dropped
  // (replayed from the base and replica, which the step has not moved yet).
  // The round is kept with this site's Δ in it: the residual the exchange
  // left is this round's.
  if (participant) residual_spent_.reset();
  Status stepped = scale.status();
  std::string digest;
  const std::uint64_t values = delta_.values;
  // Every pass over the averaged Δ since the exchange: the clip's, the digest's, the step's.
  std::uint64_t decoded = delta_.values_decoded;
  double on_loop = seconds_between(started, Clock::now());
  if (scale.ok()) {
    // The step, and in the same pass the digest it is checked against the
    // COMMITTED one with, off the event loop (tens of seconds at 70B): the
    // machine, applying, holds every message and request that would read
    // the state until it ends, and the trainer's host answers nothing
    // meanwhile (it reads the anchor to welcome a trainer).
    step_running_ = true;  // resume_after_step() ends it, once the machine is to hear of the step
    if (host_) host_->pause();
    double cpu = 0;
    const float s = *scale;
    auto d = co_await off_loop(passes_, [&]() -> Result<std::uint64_t> {
      ThreadCpuTimer timer(cpu);
      auto stepped_digest =
          diloco::step_chunks_digest(state_.anchor, state_.momentum, delta_offset_, delta_.values, delta_.chunk_list(),
                                     spec_.outer.outer, s, pass_threads(cpu, false));
      decoded = delta_.values_decoded;
      // The round's chunks, freed on the connections' threads, leave the process too.
      delta_.clear();
      return_freed_memory();
      return stepped_digest;
    });
    round_costs_.outer_step += cpu;
    stepped = d.status();
    if (d.ok()) digest = digest_hex(*d);
  }
  round_costs_.averaged_values_decoded += decoded;
  started = Clock::now();
  forget_delta();
  // Stepped in place: after a failure the anchor is no committed state
  // until one is installed (the machine catches up).
  anchor_committed_ = stepped.ok() && digest == c.anchor_digest;
  if (!stepped.ok()) co_return stepped;
  if (digest != c.anchor_digest)
    co_return Status(Err::mismatch, cat("after round ", c.round, " this site's anchor is ", digest,
                                        ", the committed one ", c.anchor_digest));
  const auto now = Clock::now();
  RoundRecord r;
  r.bytes_sent = round_bytes_sent_;
  r.bytes_received = round_bytes_received_;
  const double raw =
      participant ? diloco::allreduce_bytes_per_site(4.0 * static_cast<double>(values), plan_.participants.size()) : 0;
  r.compression_ratio = round_bytes_sent_ > 0 ? raw / static_cast<double>(round_bytes_sent_) : 0;
  r.compute_seconds = participant ? seconds_between(phase_started_, phase_at_) : 0;
  r.waiting_seconds = participant ? seconds_between(phase_at_, plan_at_) : 0;
  r.exchange_seconds = seconds_between(plan_at_, now);
  if (participant) {
    r.trainer_compute_seconds = phase_compute_seconds_;
    r.trainer_loop_seconds = phase_loop_seconds_;
  }
  r.contributed = participant;
  RoundCosts costs = round_costs_;
  {
    ThreadCpuTimer timer(costs.history);
    keep_committed_round(c, plan_, coordinator(), std::move(r));
  }
  on_loop += seconds_between(started, Clock::now());
  costs.loop_busy_seconds = std::max(loop_busy_, on_loop);
  rounds_->set_costs(c.round, costs);
  if (env_.metrics) show_round_costs(*env_.metrics, spec_.name, costs);
  co_return Status();
}

void JobRun::describe_round(RoundRecord& r, const PlanMessage& plan, std::uint64_t round,
                            const std::string& digest) const {
  r.round = round;
  r.fragment = diloco::fragment_of_round(round, spec_.fragments());
  r.fragments = spec_.fragments();
  r.participants = plan.participants;
  r.late = plan.late;
  r.loss = plan.loss;
  r.tokens = plan.tokens;
  r.digest = digest;
}

void JobRun::keep_committed_round(const CommittedMessage& c, const PlanMessage& plan, const std::string& coordinator,
                                  RoundRecord r) {
  describe_round(r, plan, c.round, c.anchor_digest);
  state_.round = c.round;
  if (Status kept = rounds_->append(r); !kept.ok())
    spdlog::error(
        "[{}] round {}: {} record(s) wait to be written to {} (listed meanwhile; written before the "
        "next round's): {}",
        spec_.name, c.round, rounds_->unwritten(), kRoundLogFile, kept.message());
  record(committed_event(plan, c.round, r.fragment, coordinator, c.epoch, c.anchor_digest, c.final));
  // What a successor needs of this round, should this site take the office.
  journal_committed(
      CommittedRecord{c.round, c.anchor_digest, c.tokens, c.final, c.attempt.value_or(plan.attempt), c.epoch, ""});
  note(cat("round ", c.round, streaming() ? cat(" (fragment ", r.fragment, ")") : std::string(),
           " committed: ", plan.participants.size(), " site(s)",
           plan.late.empty() ? std::string() : cat(", late: ", plan.late.size()), ", loss ", plan.loss,
           r.installed_from.empty() ? cat(", sent ", r.bytes_sent, " bytes") : cat(", from the ", r.installed_from),
           ", anchor ", c.anchor_digest));
  if (env_.metrics) show_committed_round(*env_.metrics, spec_.name, r);
  set_state(JobState::running, cat("round ", c.round, " committed"));
}

asio::awaitable<void> JobRun::apply_logged(CommittedMessage c, std::uint64_t attempt) {
  auto keep = shared_from_this();
  bool lost = false;
  Status applied = Status(Err::internal, "the step from the round log did not finish");
  try {
    applied = co_await apply_logged_round(c, attempt, lost);
  } catch (const std::exception& e) {  // during the step, the state may be half stepped: no round's
    applied = Status(Err::internal, cat("the step from the round log: ", e.what()));
    lost = lost || step_running_;
  } catch (...) {
    applied = Status(Err::internal, "the step from the round log stopped on an unknown exception");
    lost = lost || step_running_;
  }
  resume_after_step();
  if (lost && !state_.anchor.empty()) drop_lost_state();
  // Nothing moved: a copy of the held anchor kept for this step is the
  // held anchor again (a later install keeps it afresh).
  if (!applied.ok() && !lost && late_anchor_ == state_.anchor) late_anchor_ = std::vector<float>();
  machine_->on_logged_applied(applied, lost);
  drive();
}

asio::awaitable<Status> JobRun::apply_logged_round(CommittedMessage c, std::uint64_t attempt, bool& state_lost) {
  state_lost = false;
  finish_checkpoint();
  if (!round_deltas_ || !journal_) co_return Status(Err::internal, "no round log is open");
  std::string voted_to;  // unused: the round is recorded as committed by the sender of COMMITTED
  const auto plan = journaled_plan(journal_->records(), c.round, attempt, voted_to);
  if (!plan)
    co_return Status(Err::mismatch, cat("the journal keeps no plan with this site's vote of round ", c.round,
                                        " (attempt ", attempt, ")"));
  // Off the event loop, as apply_round()'s step: the machine is applying,
  // and the trainer's host is paused until the step ends.
  step_running_ = true;
  if (host_) host_->pause();
  const LoggedStep step = co_await off_loop(passes_, [&] {
    return step_logged_round(state_, *round_deltas_, c.round, c.anchor_digest, attempt, spec_.compression,
                             spec_.outer.outer, env_.site.pass_threads());
  });
  resume_after_step();
  if (step.lost) {
    state_lost = true;
    drop_lost_state();
  }
  if (!step.stepped) co_return Status(Err::mismatch, step.why);
  anchor_committed_ = true;
  RoundRecord r;
  r.contributed = std::find(plan->participants.begin(), plan->participants.end(), self()) != plan->participants.end();
  // The encodes of this site's share of the round went with the memory of
  // the run that voted: its residual starts again from zero, as after a
  // replay at start. (A site whose work was not in the round keeps it.)
  if (feedback_ && r.contributed) feedback_ = std::make_unique<compression::ErrorFeedback>(state_.anchor.size());
  residual_spent_.reset();
  r.installed_from = "round log";
  // Recorded as committed by the office that sent COMMITTED, as apply_round() does.
  keep_committed_round(c, *plan, coordinator(), std::move(r));
  co_return Status();
}

void JobRun::drop_lost_state() {
  // Stepped to no committed anchor: nothing of it is kept; a peer gives the state.
  anchor_committed_ = false;
  state_ = outer::OuterState();
  feedback_.reset();
  checkpoint_.reset();
}

}  // namespace geoloco::daemon
