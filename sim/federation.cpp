#include "sim/federation.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <thread>

#include "common/digest.h"
#include "common/wan_model.h"
#include "compression/error_feedback.h"
#include "diloco/fragments.h"
#include "inner/collective/collective.h"
#include "inner/cpu/blas.h"
#include "inner/train/eval_log.h"
#include "inner/train/synced_training.h"
#include "inner/train/trainer.h"
#include "sim/exchange.h"
#include "sim/site.h"

namespace geoloco::sim {

namespace {

// One site's trainer, start to end, on its own thread: what geoloco-train's
// main() does with a daemon, with the simulated site as the daemon.
Status run_trainer(const SimulatedSiteOptions& site, SimulatedSite& channel, const std::string& eval_log,
                   std::shared_ptr<const inner::Dataset> data) {
  inner::TrainCommand c = site.command;
  c.sync.channel = channel.factory();
  c.sync.state_dir.clear();  // a simulated trainer never restarts
  c.sync.eval_log = eval_log;
  // W workers of 1 micro-batch each are, bit for bit, 1 worker of W micro-batches (inner/README.md).
  c.train.micro_batches *= static_cast<std::size_t>(std::max(c.workers, 1));
  inner::SingleCollective collective;
  std::ostringstream out;  // what rank 0 would print: not needed here
  auto started =
      inner::SyncedTraining::start(c.train, c.sync, collective, std::move(data), out, inner::Trainer::factory());
  if (!started.ok()) return started.status();
  inner::TrainHooks hooks;
  // The modelled clock: it moves by the site's step time with every step.
  auto now = std::make_shared<double>(0.0);
  hooks.clock = [now] { return *now; };
  hooks.on_step = [now, dt = site.seconds_per_step](const inner::StepStats&) { *now += dt; };
  return (*started)->run(hooks).status();
}

// The coordinator's trainer's eval log: the line of round r + 1 evaluates
// the anchor after round r (eval_log.h).
void read_eval_log(const std::string& path, FederationReport& report) {
  const auto h = inner::read_eval_log(path);
  for (const auto& [round, loss] : h.loss)
    if (round > 0) report.eval_loss[round - 1] = loss;
  for (const auto& [round, accuracy] : h.accuracy)
    if (round > 0) report.accuracy[round - 1] = accuracy;
}

class Federation {
 public:
  explicit Federation(const FederationOptions& o) : o_(o) {
    for (const auto& s : o_.sites) names_.push_back(s.name);
  }

  ~Federation() {
    {
      std::lock_guard lock(monitor_.mutex);
      if (monitor_.aborted.ok()) monitor_.aborted = Status(Err::io, "the simulation ended");
      monitor_.changed.notify_all();
    }
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  Result<FederationReport> run(const std::function<void(const RoundReport&)>& on_round) {
    GEOLOCO_TRY(o_.validate());
    auto data = inner::load_dataset(o_.sites.front().command.train);
    if (!data.ok()) return data.status();
    inner::cpu::set_blas_threads(1);  // each trainer sums in one fixed order, as geoloco-train's default does
    const bool streaming = o_.fragments > 1;
    for (const auto& s : o_.sites)
      sites_.push_back(std::make_unique<SimulatedSite>(monitor_, o_.fragments, streaming, s.name == o_.coordinator));
    for (std::size_t i = 0; i < o_.sites.size(); ++i) {
      const std::string log = o_.sites[i].name == o_.coordinator ? o_.eval_log : std::string();
      threads_.emplace_back([this, i, log, d = *data] {
        Status s = run_trainer(o_.sites[i], *sites_[i], log, d);
        std::lock_guard lock(monitor_.mutex);
        sites_[i]->finished(s);
      });
    }
    GEOLOCO_TRY(start());
    for (std::uint64_t r = 1; r <= o_.rounds; ++r) {
      auto round = run_round(r);
      if (!round.ok()) return fail(round.status());
      report_.total_exchange_seconds += round->exchange_seconds;
      for (auto b : round->bytes_sent) report_.total_bytes_sent += b;
      if (on_round) on_round(*round);
      report_.rounds.push_back(std::move(*round));
    }
    // Every trainer got its stop with the last RESULT: let them end.
    for (auto& t : threads_) t.join();
    for (std::size_t i = 0; i < sites_.size(); ++i)
      if (!sites_[i]->status().ok())
        return Status(sites_[i]->status().code(),
                      cat("site ", o_.sites[i].name, "'s trainer: ", sites_[i]->status().message()));
    report_.parameters = anchor_.size();
    if (!o_.eval_log.empty()) read_eval_log(o_.eval_log, report_);
    report_.anchor = anchor_;
    report_.anchor_digest = digest_hex(digest_f32(anchor_));
    return std::move(report_);
  }

 private:
  Status fail(Status why) {
    std::lock_guard lock(monitor_.mutex);
    if (monitor_.aborted.ok()) monitor_.aborted = why;
    monitor_.changed.notify_all();
    return why;
  }

  // With the lock held: a trainer that ended while the federation waits for it.
  Status ended_early() const {
    for (std::size_t i = 0; i < sites_.size(); ++i)
      if (sites_[i]->done())
        return Status(sites_[i]->status().ok() ? Err::internal : sites_[i]->status().code(),
                      cat("site ", o_.sites[i].name, "'s trainer ended early",
                          sites_[i]->status().ok() ? std::string() : cat(": ", sites_[i]->status().message())));
    return {};
  }

  // The coordinator's trainer hands over its initialization; it becomes
  // round 1's anchor on every site, with zero momentum.
  Status start() {
    std::unique_lock lock(monitor_.mutex);
    SimulatedSite* coordinator = nullptr;
    for (std::size_t i = 0; i < sites_.size(); ++i)
      if (o_.sites[i].name == o_.coordinator) coordinator = sites_[i].get();
    Status early;
    monitor_.changed.wait(lock, [&] {
      early = ended_early();
      return (coordinator->initialized() &&
              std::all_of(sites_.begin(), sites_.end(), [](const auto& s) { return s->connected(); })) ||
             !early.ok();
    });
    if (!early.ok()) {
      lock.unlock();
      return fail(early);
    }
    const auto init = coordinator->initialization();
    anchor_.assign(init.begin(), init.end());
    momentum_.assign(anchor_.size(), 0.0f);
    report_.initial_digest = digest_hex(digest_f32(anchor_));
    if (compression::uses_error_feedback(o_.pipeline))
      for (std::size_t i = 0; i < sites_.size(); ++i)
        feedback_.push_back(std::make_unique<compression::ErrorFeedback>(anchor_.size()));
    for (auto& s : sites_) s->publish_anchor(anchor_);
    return {};
  }

  Result<RoundReport> run_round(std::uint64_t r) {
    const std::uint32_t f = diloco::fragment_of_round(r, o_.fragments);
    std::unique_lock lock(monitor_.mutex);
    // Every site's SYNC of round r (its fragment), or a trainer that ended.
    auto sync_of = [&](const SimulatedSite& s) -> const SiteSync* {
      for (const auto& p : s.pending())
        if (p.round == r && p.fragment == f) return &p;
      return nullptr;
    };
    Status early;
    monitor_.changed.wait(lock, [&] {
      early = ended_early();
      return std::all_of(sites_.begin(), sites_.end(), [&](const auto& s) { return sync_of(*s) != nullptr; }) ||
             !early.ok() || !monitor_.aborted.ok();
    });
    if (!monitor_.aborted.ok()) return monitor_.aborted;
    if (!early.ok()) return early;

    // The plan, as the coordinator makes it: weights by the straggler rule,
    // participants in name order.
    std::vector<diloco::Contribution> contributions;
    std::vector<diloco::ReportedWork> work;
    for (std::uint32_t i = 0; i < sites_.size(); ++i) {
      const SiteSync& s = *sync_of(*sites_[i]);
      work.push_back(diloco::reported_work(s.tokens, s.loss));  // as the site's READY carries it
      contributions.push_back({i, r, o_.inner_steps, work.back().tokens});
    }
    auto decisions = diloco::decide_round(contributions, r, o_.weighting, o_.straggler);
    if (!decisions.ok()) return Status(decisions.status().code(), cat("round ", r, ": ", decisions.status().message()));
    const auto ordered = diloco::order_plan(*decisions, names_, work);

    const auto& desc = sites_.front()->fragments().at(f);  // every site's table is cut alike
    RoundReport rep;
    rep.round = r;
    rep.fragment = f;
    ExchangeSpec spec;
    spec.round = r;
    spec.seed = o_.seed;
    spec.chunk_elements = o_.chunk_elements;
    spec.feedback_offset = desc.offset;
    spec.pipeline = o_.pipeline;
    std::vector<ExchangeInput> inputs;
    const auto base = std::span<const float>(anchor_).subspan(desc.offset, desc.length);
    for (auto i : ordered.participants) {
      rep.participants.push_back(o_.sites[i].name);
      inputs.push_back({std::span<const float>(sites_[i]->parameters()).subspan(desc.offset, desc.length), base,
                        feedback_.empty() ? nullptr : feedback_[i].get()});
    }
    rep.weights = ordered.weights;
    rep.tokens = ordered.tokens;
    rep.train_loss = ordered.loss;
    spec.weights = ordered.weights;
    auto ex = run_exchange(spec, inputs);
    if (!ex.ok()) return Status(ex.status().code(), cat("round ", r, ": ", ex.status().message()));

    const float scale = diloco::clip_scale(std::sqrt(diloco::add_squares(0.0, ex->delta)), o_.outer.clip_norm);
    Status stepped =
        diloco::outer_step(std::span<float>(anchor_).subspan(desc.offset, desc.length),
                           std::span<float>(momentum_).subspan(desc.offset, desc.length), ex->delta, o_.outer, scale);
    if (!stepped.ok()) return Status(stepped.code(), cat("round ", r, ": ", stepped.message()));
    rep.bytes_sent = ex->bytes_sent;
    rep.payload_bytes = ex->payload_bytes;
    rep.raw_bytes = ex->raw_bytes;
    rep.exchange_seconds =
        modelled_exchange_seconds(static_cast<double>(*std::max_element(ex->bytes_sent.begin(), ex->bytes_sent.end())),
                                  o_.bandwidth_bits_per_s, o_.rtt_ms, kRoundTrips);
    rep.anchor_digest = digest_hex(digest_f32(anchor_));
    if (std::find(o_.residual_lost_after.begin(), o_.residual_lost_after.end(), r) != o_.residual_lost_after.end())
      for (auto& f : feedback_) f = std::make_unique<compression::ErrorFeedback>(anchor_.size());

    // RESULT to every site, as TrainerHost::finish_round sends it.
    const bool stop = r == o_.rounds;
    const std::uint64_t next = o_.fragments > 1 ? diloco::next_round_of_fragment(f, r + 1, o_.fragments) : r + 1;
    for (auto& s : sites_) s->answer(f, anchor_, next, stop);
    return rep;
  }

  const FederationOptions& o_;
  std::vector<std::string> names_;  // by site index, job order
  Monitor monitor_;
  std::vector<std::unique_ptr<SimulatedSite>> sites_;
  std::vector<std::thread> threads_;
  std::vector<float> anchor_, momentum_;
  std::vector<std::unique_ptr<compression::ErrorFeedback>> feedback_;  // by site, job order
  FederationReport report_;
};

}  // namespace

Status FederationOptions::validate() const {
  GEOLOCO_RETURN_IF(sites.empty() || sites.size() > 1024, Err::invalid_argument, "simulation: 1 to 1024 sites, got ",
                    sites.size());
  GEOLOCO_RETURN_IF(std::none_of(sites.begin(), sites.end(), [&](const auto& s) { return s.name == coordinator; }),
                    Err::invalid_argument, "simulation: the coordinator '", coordinator, "' is not one of the sites");
  GEOLOCO_RETURN_IF(rounds < 1, Err::invalid_argument, "simulation: rounds must be at least 1");
  GEOLOCO_RETURN_IF(fragments < 1, Err::invalid_argument, "simulation: streaming.fragments must be at least 1");
  GEOLOCO_RETURN_IF(chunk_elements < 1, Err::invalid_argument, "simulation: chunk_elements must be at least 1");
  GEOLOCO_RETURN_IF(!(bandwidth_bits_per_s > 0.0 && std::isfinite(bandwidth_bits_per_s)), Err::invalid_argument,
                    "simulation: bandwidth must be a finite rate > 0 bit/s, got ", bandwidth_bits_per_s);
  GEOLOCO_RETURN_IF(!(rtt_ms >= 0.0 && std::isfinite(rtt_ms)), Err::invalid_argument,
                    "simulation: rtt must be a finite time >= 0 ms, got ", rtt_ms);
  for (const auto& s : sites) {
    GEOLOCO_RETURN_IF(!s.command.synced, Err::invalid_argument, "simulation: site ", s.name,
                      "'s trainer command names no daemon");
    GEOLOCO_RETURN_IF(s.command.backend != "cpu", Err::invalid_argument, "simulation: site ", s.name,
                      " trains with --backend ", s.command.backend, "; the simulator runs the CPU backend");
    GEOLOCO_RETURN_IF(!(s.seconds_per_step > 0.0 && std::isfinite(s.seconds_per_step)), Err::invalid_argument,
                      "simulation: site ", s.name, "'s seconds per step must be finite and > 0");
  }
  for (std::uint64_t r : residual_lost_after)
    GEOLOCO_RETURN_IF(r < 1 || r > rounds, Err::invalid_argument, "simulation: a residual can be lost after rounds 1..",
                      rounds, ", not ", r);
  GEOLOCO_TRY(outer.validate());
  GEOLOCO_TRY(straggler.validate());
  return compression::validate(pipeline);
}

Result<FederationReport> run_federation(const FederationOptions& options,
                                        const std::function<void(const RoundReport&)>& on_round) {
  Federation federation(options);
  return federation.run(on_round);
}

}  // namespace geoloco::sim
