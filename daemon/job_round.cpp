// One round of a job on this site (job_run.h), from its PLAN to its end:
// the exchange (Δ = anchor − replica through the all-reduce, or the average
// only for a late site), the outer step computed aside for the COMMIT digest,
// then COMMITTED (the step applied, the residual stored, the trainer
// released) or ABORT (nothing to undo). With streaming, the round's values
// are one fragment (round_range()). The rest of the engine is job_run.cpp.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <cmath>
#include <spdlog/spdlog.h>

#include "common/digest.h"
#include "daemon/job_run.h"
#include "daemon/job_util.h"
#include "inner/protocol/layout.h"
#include "inner/protocol/streaming_schedule.h"
#include "outer/outer_optimizer.h"
#include "transport/allreduce.h"

namespace geoloco::daemon {

using Clock = std::chrono::steady_clock;

namespace {
}  // namespace

void JobRun::on_plan(const PlanMessage& plan) {
  if (!have_state_ || need_state_) return;  // catching up: this round goes on without us
  if (plan.round <= state_.round) return;    // an old plan
  if (plan.round > state_.round + 1) {
    need_state_ = true;
    request_state();
    return;
  }
  if (!contains(plan.participants, self()) && !contains(plan.late, self())) return;
  if (step_ == Step::exchanging) {
    queued_plan_ = plan;  // a retry while the aborted attempt still unwinds
    return;
  }
  if (step_ == Step::committing) {
    // Our COMMITTED was lost and the coordinator planned the round again: an abort in effect.
    on_abort(AbortMessage{plan.round, "planned again"});
  }
  if (contains(plan.participants, self()) && (!phase_ || phase_->round > plan.round)) {
    spdlog::warn("[{}] named a participant of round {} without a finished phase here; sitting it out", spec_.name,
                 plan.round);
    return;
  }
  asio::co_spawn(env_.executor, exchange(plan), asio::detached);
}

asio::awaitable<void> JobRun::exchange(PlanMessage plan) {
  auto keep = shared_from_this();
  step_ = Step::exchanging;
  plan_ = plan;
  plan_at_ = Clock::now();
  plan_participant_ = contains(plan.participants, self());
  aborted_ = false;
  early_commit_.reset();
  auto range = round_range(plan.round);
  if (!range.ok()) {
    spdlog::error("[{}] round {}: {}", spec_.name, plan.round, range.status().message());
    if (plan_participant_) send(spec_.coordinator, AbortMessage{plan.round, cat("failure: ", range.status().message())});
    step_ = Step::idle;
    co_return;
  }
  const std::size_t n = range->length;
  delta_offset_ = range->offset;
  std::span<const float> base, replica;  // Δ = base − replica, made chunk by chunk by the all-reduce
  if (plan_participant_) {
    base = host_->anchor();
    replica = phase_->replica;
    if (base.size() != state_.anchor.size() || replica.size() != n || phase_->offset != delta_offset_) {
      spdlog::error("[{}] the trainer's replica holds {} values at {}, round {} syncs {} at {} of the anchor's {}",
                    spec_.name, replica.size(), phase_->offset, plan.round, n, delta_offset_, base.size());
      send(spec_.coordinator, AbortMessage{plan.round, "failure: the replica does not match the round's values"});
      step_ = Step::idle;
      co_return;
    }
    base = base.subspan(delta_offset_, n);
  }
  delta_.clear();
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
  request.feedback = plan_participant_ ? feedback_.get() : nullptr;
  request.feedback_offset = delta_offset_;
  // The residual changes only when the round is kept (apply()): an ABORT has nothing to undo.
  request.defer_feedback = true;
  request.seed = spec_.seed;
  request.timeout = std::chrono::milliseconds(4 * env_.site.heartbeat_timeout_ms);
  auto result = co_await transport::all_reduce(*env_.mesh, request);

  if (done()) co_return;
  if (aborted_ || !result.ok()) {
    if (!aborted_) {
      spdlog::warn("[{}] the exchange of round {} failed: {}", spec_.name, plan.round, result.status().message());
      if (plan_participant_) send(spec_.coordinator, AbortMessage{plan.round, cat("failure: ", result.status().message())});
    }
    delta_.clear();
    step_ = Step::idle;
    ready_sent_round_ = 0;
    if (queued_plan_) {
      auto next = *queued_plan_;
      queued_plan_.reset();
      on_plan(next);
    }
    maybe_ready();
    co_return;
  }
  round_bytes_sent_ = result->bytes_sent;
  round_bytes_received_ = result->bytes_received;
  auto scale = clip_scale_of_delta();
  auto digest = scale.ok() ? next_anchor_digest(*scale) : Result<std::string>(scale.status());
  if (!digest.ok()) {
    spdlog::error("[{}] round {}: {}", spec_.name, plan.round, digest.status().message());
    if (plan_participant_) send(spec_.coordinator, AbortMessage{plan.round, cat("failure: ", digest.status().message())});
    step_ = Step::idle;
    co_return;
  }
  pending_digest_ = *digest;
  step_ = Step::committing;
  if (plan_participant_) send(spec_.coordinator, CommitMessage{plan.round, pending_digest_});
  if (early_commit_) {
    auto c = *early_commit_;
    early_commit_.reset();
    on_committed(c);
  }
  changed_.notify_all();
}

Result<float> JobRun::clip_scale_of_delta() const {
  double squares = 0;
  GEOLOCO_TRY(delta_.for_each([&](std::uint64_t, std::span<const float> values) {
    squares = outer::add_squares(squares, values);
    return Status();
  }));
  return outer::clip_scale(std::sqrt(squares), spec_.outer.outer.clip_norm);
}

Result<std::string> JobRun::next_anchor_digest(float scale) const {
  // The anchor as it will be: the values before and after the round's range
  // as they are, the range stepped piece by piece on copies.
  StreamingDigest digest;
  const std::span<const float> all(state_.anchor);
  const std::size_t n = delta_.values, at = delta_offset_;
  GEOLOCO_RETURN_IF(at + n > all.size(), Err::internal, "the round's values [", at, ", ", at + n,
                    ") lie outside the anchor's ", all.size());
  digest.update(all.first(at));
  // Δ's chunks come decoded in order, one at a time; each is stepped on copies.
  std::vector<float> anchor, momentum;
  GEOLOCO_TRY(delta_.for_each([&](std::uint64_t begin, std::span<const float> d) -> Status {
    anchor.assign(all.begin() + static_cast<long>(at + begin), all.begin() + static_cast<long>(at + begin + d.size()));
    momentum.assign(state_.momentum.begin() + static_cast<long>(at + begin),
                    state_.momentum.begin() + static_cast<long>(at + begin + d.size()));
    GEOLOCO_TRY(outer::outer_step(anchor, momentum, d, spec_.outer.outer, scale));
    digest.update(std::span<const float>(anchor));
    return Status();
  }));
  digest.update(all.subspan(at + n));
  return digest_hex(digest.value());
}

Result<inner::protocol::FragmentDesc> JobRun::round_range(std::uint64_t round) const {
  const std::uint64_t n = state_.anchor.size();
  if (!streaming()) return inner::protocol::FragmentDesc{0, n, round};
  // The same cut as the trainer's fragment table (TrainerHost: split_fragments of its layout).
  inner::protocol::Layout layout;
  std::uint64_t offset = 0;
  for (const auto& t : state_.layout) {
    inner::protocol::TensorDesc d;
    d.name = t.name;
    d.shape = t.shape;
    d.offset = offset;
    offset += d.size();
    layout.push_back(std::move(d));
  }
  auto table = inner::protocol::split_fragments(layout, spec_.fragments(), round);
  if (!table.ok())
    return Status(table.status().code(), cat("streaming.fragments: ", table.status().message()));
  GEOLOCO_RETURN_IF(offset != n, Err::internal, "the layout holds ", offset, " values, the anchor ", n);
  return (*table)[inner::protocol::fragment_of_round(round, spec_.fragments())];
}

void JobRun::on_committed(const CommittedMessage& c) {
  if (c.final) final_seen_ = true;
  known_committed_ = std::max(known_committed_, c.round);
  if (c.round <= state_.round) {
    if (final_seen_ && c.round == state_.round && job_state_ != JobState::finished && !stopping_)
      asio::co_spawn(env_.executor, finish_job(), asio::detached);
    return;
  }
  if (c.round == state_.round + 1 && step_ != Step::idle && plan_.round == c.round) {
    if (step_ == Step::exchanging) {
      early_commit_ = c;  // an observer still receiving: apply when it is in
      return;
    }
    apply(c);
    return;
  }
  // A round this site had no part in: catch up.
  need_state_ = true;
  request_state();
}

void JobRun::apply(const CommittedMessage& c) {
  const auto scale = clip_scale_of_delta();
  // A site whose work is not in this round keeps training from the anchor it
  // has: keep that anchor (the base of its late Δ) before the step moves it.
  // (With streaming late work is dropped, so no such anchor is needed.)
  if (!plan_participant_ && late_anchor_.empty() && !streaming()) late_anchor_ = state_.anchor;
  // The round is kept: this site's residual takes what its encodes dropped
  // (replayed from the base and replica, which the step has not moved yet).
  if (plan_participant_ && feedback_) {
    if (Status fb = transport::commit_feedback(*env_.mesh, request_); !fb.ok())
      spdlog::error("[{}] round {}: error feedback not stored: {}", spec_.name, c.round, fb.message());
  }
  Status stepped = scale.status();
  if (stepped.ok())
    stepped = delta_.for_each([&](std::uint64_t begin, std::span<const float> d) {
      const std::size_t from = delta_offset_ + begin;
      return outer::outer_step(std::span<float>(state_.anchor).subspan(from, d.size()),
                               std::span<float>(state_.momentum).subspan(from, d.size()), d, spec_.outer.outer, *scale);
    });
  const std::string digest = digest_hex(state_.anchor_digest());
  const auto now = Clock::now();
  RoundRecord r;
  r.round = c.round;
  r.fragment = inner::protocol::fragment_of_round(c.round, spec_.fragments());
  r.fragments = spec_.fragments();
  r.participants = plan_.participants;
  r.late = plan_.late;
  r.loss = plan_.loss;
  r.tokens = plan_.tokens;
  r.bytes_sent = round_bytes_sent_;
  r.bytes_received = round_bytes_received_;
  const double parts = static_cast<double>(plan_.participants.size());
  const double raw = plan_participant_ ? 4.0 * static_cast<double>(delta_.values) * 2.0 * (parts - 1) / parts : 0;
  r.compression_ratio = round_bytes_sent_ > 0 ? raw / static_cast<double>(round_bytes_sent_) : 0;
  r.compute_seconds = plan_participant_ ? seconds_between(phase_started_, phase_at_) : 0;
  r.waiting_seconds = plan_participant_ ? seconds_between(phase_at_, plan_at_) : 0;
  r.exchange_seconds = seconds_between(plan_at_, now);
  r.digest = digest;
  r.contributed = plan_participant_;
  delta_.clear();
  step_ = Step::idle;
  if (!stepped.ok() || digest != c.anchor_digest) {
    spdlog::error("[{}] after round {} this site's anchor is {}, the committed one {}: fetching the state", spec_.name,
                  c.round, stepped.ok() ? digest : stepped.message(), c.anchor_digest);
    need_state_ = true;
    request_state();
    return;
  }
  state_.round = c.round;
  bytes_sent_ += round_bytes_sent_;
  bytes_received_ += round_bytes_received_;
  records_.push_back(r);
  note(cat("round ", c.round, streaming() ? cat(" (fragment ", r.fragment, ")") : std::string(), " committed: ",
           plan_.participants.size(), " site(s)",
           plan_.late.empty() ? std::string() : cat(", late: ", plan_.late.size()), ", loss ", plan_.loss,
           ", sent ", round_bytes_sent_, " bytes, anchor ", digest));
  if (auto* m = env_.metrics) {
    const Labels job{{"job", spec_.name}};
    (void)m->add("geoloco_rounds_total", job, 1);
    (void)m->set("geoloco_round", job, double(c.round));
    (void)m->set("geoloco_round_participants", job, parts);
    (void)m->add("geoloco_stragglers_total", job, double(plan_.late.size()));
    (void)m->set("geoloco_loss", job, plan_.loss);
    (void)m->set("geoloco_compression_ratio", job, r.compression_ratio);
    (void)m->set("geoloco_round_compute_seconds", job, r.compute_seconds);
    (void)m->set("geoloco_round_waiting_seconds", job, r.waiting_seconds);
    (void)m->set("geoloco_round_exchange_seconds", job, r.exchange_seconds);
    (void)m->add("geoloco_tokens_total", job, double(plan_.tokens));
  }
  if (plan_participant_) release_phase(c.final);
  if (spec_.checkpoint_every() > 0 && c.round % spec_.checkpoint_every() == 0 && !c.final) {
    if (Status s = save_checkpoint(); !s.ok()) spdlog::error("[{}] checkpoint: {}", spec_.name, s.message());
  }
  set_state(JobState::running, cat("round ", c.round, " committed"));
  if (c.final) asio::co_spawn(env_.executor, finish_job(), asio::detached);
  if (queued_plan_) {
    auto next = *queued_plan_;
    queued_plan_.reset();
    on_plan(next);
  }
}

void JobRun::on_abort(const AbortMessage& a) {
  if (a.round != state_.round + 1) return;
  note(cat("round ", a.round, " aborted: ", a.reason));
  ready_sent_round_ = 0;  // READY again
  if (step_ == Step::exchanging) {
    aborted_ = true;  // exchange() discards its result
    return;
  }
  if (step_ == Step::committing) {
    delta_.clear();
    step_ = Step::idle;
  }
}

}  // namespace geoloco::daemon
