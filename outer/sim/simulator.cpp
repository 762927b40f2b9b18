#include "outer/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "common/digest.h"
#include "compression/counter_rng.h"
#include "compression/error_feedback.h"
#include "compression/pipeline.h"
#include "outer/aggregator.h"
#include "outer/checkpoint.h"
#include "outer/pseudo_gradient.h"
#include "outer/sim/rng.h"

namespace geoloco::outer::sim {

namespace {

using compression::ChunkLayout;
using compression::ErrorFeedback;
using compression::Pipeline;

// One two-phase all-reduce of a range [offset, offset + length) of the
// parameters over all sites, as DESIGN §3 describes it (see simulator.h).
class Exchange {
 public:
  Exchange(const SimulationOptions& options, Pipeline* pipeline, ErrorFeedback* owner_feedback)
      : options_(options), pipeline_(pipeline), owner_feedback_(owner_feedback) {}

  /// deltas[k] is participant k's input for the range, feedback[k] its
  /// residual (or null); the reduced, all-gathered values land in `out`.
  /// Chunk i is owned by participant i mod K. The all-gather residual stays
  /// with the range (one per value), whoever owns it this round.
  Status run(std::uint64_t offset, const std::vector<std::vector<float>>& deltas,
             const std::vector<Participant>& participants, const std::vector<ErrorFeedback*>& feedback,
             std::uint64_t stream_seed, std::span<float> out, RoundReport& report) {
    const std::size_t n_sites = deltas.size();
    const ChunkLayout layout{out.size(), options_.chunk_elements};
    const std::uint64_t chunks = layout.count();
    std::vector<std::uint64_t> bytes(n_sites, 0);
    auto owner = [&](std::uint64_t chunk) { return static_cast<std::size_t>(chunk % n_sites); };

    // Phase 1, sender side: every site encodes every chunk of its g_s.
    std::vector<std::vector<std::vector<std::byte>>> payloads(n_sites);
    for (std::size_t s = 0; s < n_sites; ++s) {
      payloads[s].resize(chunks);
      for (std::uint64_t i = 0; i < chunks; ++i) {
        const auto values = std::span<const float>(deltas[s]).subspan(layout.offset(i), layout.length(i));
        std::uint64_t size = values.size() * sizeof(float);
        if (pipeline_ != nullptr) {
          auto& buf = payloads[s][i];
          buf.resize(pipeline_->max_encoded_size(values.size()));
          const std::uint64_t seed = compression::chunk_seed(derive_seed(stream_seed, participants[s].site), i);
          auto encoded = feedback[s] != nullptr
                             ? feedback[s]->encode(*pipeline_, offset + layout.offset(i), values, buf, seed)
                             : pipeline_->encode(values, buf, seed);
          if (!encoded.ok()) return encoded.status();
          buf.resize(*encoded);
          size = *encoded;
        }
        report.payload_bytes += size;
        report.raw_bytes += values.size() * sizeof(float);
        if (owner(i) != s) bytes[s] += size;
      }
    }

    // Phase 1, receiver side: chunks arrive (in site order, or shuffled) and
    // are reduced in site order whatever the arrival order.
    std::vector<std::pair<std::size_t, std::uint64_t>> arrivals;
    for (std::size_t s = 0; s < n_sites; ++s)
      for (std::uint64_t i = 0; i < chunks; ++i) arrivals.emplace_back(s, i);
    if (options_.arrival_shuffle_seed != 0) {
      Rng rng(derive_seed(options_.arrival_shuffle_seed, stream_seed));
      for (std::size_t k = arrivals.size(); k > 1; --k) std::swap(arrivals[k - 1], arrivals[rng.below(k)]);
    }
    auto agg = ChunkAggregator::create(layout, participants, std::max<std::uint64_t>(chunks, 1));
    if (!agg.ok()) return agg.status();
    for (const auto& [s, i] : arrivals) {
      const std::uint32_t site = participants[s].site;
      auto reduced = pipeline_ != nullptr
                         ? agg->add_payload(site, i, payloads[s][i], *pipeline_)
                         : agg->add_decoded(site, i, std::span<const float>(deltas[s]).subspan(layout.offset(i),
                                                                                                layout.length(i)));
      if (!reduced.ok()) return reduced.status();
      if (!reduced->has_value()) continue;
      GEOLOCO_TRY(all_gather(offset, layout, i, **reduced, n_sites, stream_seed, out, bytes[owner(i)]));
    }
    GEOLOCO_RETURN_IF(!agg->complete(), Err::internal, "simulator: the exchange ended with chunks unreduced");

    std::uint64_t busiest = 0;
    for (std::size_t s = 0; s < n_sites; ++s) {
      report.bytes_sent[participants[s].site] += bytes[s];
      busiest = std::max(busiest, bytes[s]);
    }
    report.exchange_seconds += modelled_exchange_seconds(busiest, options_.bandwidth_bits_per_s, options_.rtt_ms);
    return {};
  }

 private:
  // Phase 2: the owner encodes the reduced chunk once and every site, the
  // owner included, decodes those same bytes, so all apply the same Δ.
  Status all_gather(std::uint64_t offset, const ChunkLayout& layout, std::uint64_t i, std::span<const float> reduced,
                    std::size_t n_sites, std::uint64_t stream_seed, std::span<float> out, std::uint64_t& owner_bytes) {
    auto target = out.subspan(layout.offset(i), layout.length(i));
    if (pipeline_ == nullptr) {
      std::copy(reduced.begin(), reduced.end(), target.begin());
      owner_bytes += reduced.size() * sizeof(float) * (n_sites - 1);
      return {};
    }
    buffer_.resize(pipeline_->max_encoded_size(reduced.size()));
    const std::uint64_t seed = compression::chunk_seed(derive_seed(stream_seed, 0x9a7e), i);
    auto size = owner_feedback_ != nullptr
                    ? owner_feedback_->encode(*pipeline_, offset + layout.offset(i), reduced, buffer_, seed)
                    : pipeline_->encode(reduced, buffer_, seed);
    if (!size.ok()) return size.status();
    GEOLOCO_TRY(pipeline_->decode(std::span(buffer_).first(*size), target));
    owner_bytes += *size * (n_sites - 1);
    return {};
  }

  const SimulationOptions& options_;
  Pipeline* pipeline_;
  ErrorFeedback* owner_feedback_;
  std::vector<std::byte> buffer_;
};

std::vector<Participant> participants_of(const std::vector<std::uint64_t>& tokens, Weighting weighting) {
  std::vector<Participant> out;
  for (std::size_t s = 0; s < tokens.size(); ++s) {
    const double w = weighting == Weighting::tokens ? static_cast<double>(tokens[s]) : 1.0;
    out.push_back({static_cast<std::uint32_t>(s), w});
  }
  return out;
}

Status with_context(const Status& s, std::uint64_t round, std::string_view what) {
  return Status(s.code(), cat("simulation round ", round, ", ", what, ": ", s.message()));
}

class Simulation {
 public:
  explicit Simulation(const SimulationOptions& options) : options_(options) {}

  Result<SimulationReport> run() {
    GEOLOCO_TRY(options_.validate());
    GEOLOCO_TRY(make_sites());
    std::span<float> first = trainers_[0]->parameters();
    anchor_.assign(first.begin(), first.end());
    momentum_.assign(anchor_.size(), 0.0f);
    for (auto& t : trainers_) std::copy(anchor_.begin(), anchor_.end(), t->parameters().begin());
    auto initial = trainers_[0]->evaluate(anchor_);
    if (!initial.ok()) return initial.status();
    report_.initial_loss = *initial;

    if (options_.mode == SimulationMode::data_parallel) {
      GEOLOCO_TRY(run_data_parallel());
    } else if (options_.streaming.fragments == 1 && options_.streaming.overlap_steps == 0) {
      GEOLOCO_TRY(run_rounds());
    } else {
      GEOLOCO_TRY(run_diloco());
    }
    report_.final_loss = report_.rounds.empty() ? report_.initial_loss : report_.rounds.back().loss;
    for (const auto& r : report_.rounds) {
      for (auto b : r.bytes_sent) report_.total_bytes_sent += b;
      report_.total_exchange_seconds += r.exchange_seconds;
    }
    report_.anchor = anchor_;
    report_.anchor_digest = digest_f32(anchor_);
    return std::move(report_);
  }

 private:
  Status make_sites() {
    TrainerFactory factory = options_.make_trainer ? options_.make_trainer : least_squares_factory(options_.trainer);
    for (std::uint32_t s = 0; s < options_.sites; ++s) {
      auto t = factory(s, options_.sites);
      if (!t.ok()) return with_context(t.status(), 0, cat("creating the trainer of site ", s));
      trainers_.push_back(std::move(t).value());
    }
    const auto& layout = trainers_[0]->layout();
    for (std::uint32_t s = 1; s < options_.sites; ++s) {
      GEOLOCO_RETURN_IF(trainers_[s]->parameters().size() != trainers_[0]->parameters().size(), Err::mismatch,
                        "simulation: site ", s, " has ", trainers_[s]->parameters().size(),
                        " parameters, site 0 has ", trainers_[0]->parameters().size());
    }
    GEOLOCO_RETURN_IF(total_size(layout) != trainers_[0]->parameters().size(), Err::mismatch,
                      "simulation: the trainer's layout describes ", total_size(layout), " values but it has ",
                      trainers_[0]->parameters().size(), " parameters");
    if (options_.compression) {
      auto p = Pipeline::create(*options_.compression);
      if (!p.ok()) return p.status();
      pipeline_ = std::make_unique<Pipeline>(std::move(p).value());
      if (pipeline_->error_feedback()) {
        for (std::uint32_t s = 0; s < options_.sites; ++s)
          site_feedback_.push_back(std::make_unique<ErrorFeedback>(anchor_size()));
        owner_feedback_ = std::make_unique<ErrorFeedback>(anchor_size());
      }
    }
    return {};
  }

  std::size_t anchor_size() const { return trainers_[0]->parameters().size(); }

  RoundReport new_round(std::uint64_t r) const {
    RoundReport rep;
    rep.round = r;
    rep.inner_step = r * options_.inner_steps;
    rep.bytes_sent.assign(options_.sites, 0);
    rep.site_inner_steps.assign(options_.sites, options_.inner_steps);
    rep.steps_counted.assign(options_.sites, options_.inner_steps);
    rep.steps_dropped.assign(options_.sites, 0);
    for (std::uint32_t s = 0; s < options_.sites; ++s) rep.participants.push_back(s);
    return rep;
  }

  // The end of every round, both modes: evaluate the anchor, record the
  // round, checkpoint when due.
  Status close_round(RoundReport rep, std::uint64_t r) {
    auto loss = trainers_[0]->evaluate(anchor_);
    if (!loss.ok()) return loss.status();
    rep.loss = *loss;
    rep.anchor_digest = digest_f32(anchor_);
    report_.rounds.push_back(std::move(rep));
    return maybe_checkpoint(r);
  }

  Status maybe_checkpoint(std::uint64_t round) const {
    if (options_.checkpoint_path.empty()) return {};
    if (round % options_.checkpoint_every_rounds != 0 && round != options_.rounds) return {};
    OuterState state;
    state.job = options_.job;
    state.round = round;
    state.layout = trainers_[0]->layout();
    state.anchor = anchor_;
    state.momentum = momentum_;
    for (std::size_t s = 0; s < site_feedback_.size(); ++s) {
      const auto e = site_feedback_[s]->residual();
      state.residuals.push_back({cat("site-", s), std::vector<float>(e.begin(), e.end())});
    }
    Status st = save_checkpoint(options_.checkpoint_path, state, options_.config_hash);
    if (!st.ok()) return with_context(st, round, "checkpoint");
    return {};
  }

  bool is_left_out(std::uint32_t site, std::uint64_t round) const {
    for (const auto& l : options_.left_out)
      if (l.site == site && l.round == round) return true;
    return false;
  }

  std::vector<ErrorFeedback*> feedback_pointers() const {
    std::vector<ErrorFeedback*> out(options_.sites, nullptr);
    for (std::size_t s = 0; s < site_feedback_.size(); ++s) out[s] = site_feedback_[s].get();
    return out;
  }

  // Plain DiLoCo (one fragment, no overlap), round by round: sites may run
  // different step counts (time-based phases) and miss PLANs (stragglers).
  Status run_rounds() {
    const std::uint32_t n_sites = options_.sites;
    std::vector<std::vector<float>> start(n_sites, anchor_);  // the anchor each site started from
    std::vector<std::uint64_t> start_round(n_sites, 1);
    std::vector<std::uint64_t> steps_pending(n_sites, 0), tokens_pending(n_sites, 0);
    const std::vector<ErrorFeedback*> feedback = feedback_pointers();
    Exchange exchange(options_, pipeline_.get(), owner_feedback_.get());
    std::uint64_t most_steps = 0;
    std::vector<std::uint64_t> total_steps(n_sites, 0);
    for (std::uint64_t r = 1; r <= options_.rounds; ++r) {
      RoundReport rep = new_round(r);
      rep.participants.clear();
      double loss_sum = 0.0;
      std::uint64_t loss_count = 0;
      for (std::uint32_t s = 0; s < n_sites; ++s) {
        const double seconds = options_.site_seconds_per_step.empty() ? 1.0 : options_.site_seconds_per_step[s];
        auto steps = planned_inner_steps({options_.inner_steps, options_.inner_duration_s, 1}, seconds);
        if (!steps.ok()) return with_context(steps.status(), r, cat("inner phase of site ", s));
        for (std::uint64_t k = 0; k < *steps; ++k) {
          auto step = trainers_[s]->step();
          if (!step.ok()) return with_context(step.status(), r, cat("inner step ", k + 1, " of site ", s));
          loss_sum += step->loss;
          ++loss_count;
          tokens_pending[s] += step->tokens;
        }
        steps_pending[s] += *steps;
        total_steps[s] += *steps;
        rep.site_inner_steps[s] = *steps;
        most_steps = std::max(most_steps, total_steps[s]);
      }
      rep.inner_step = most_steps;

      // The PLAN: every site not left out reports; the rules weigh them.
      std::vector<Contribution> ready;
      for (std::uint32_t s = 0; s < n_sites; ++s)
        if (!is_left_out(s, r)) ready.push_back({s, start_round[s], steps_pending[s], tokens_pending[s]});
      GEOLOCO_RETURN_IF(ready.empty(), Err::invalid_argument, "simulation round ", r,
                        ": every site is left out of the PLAN; a round needs at least one");
      auto decisions = decide_round(ready, r, options_.weighting, options_.straggler);
      if (!decisions.ok()) return with_context(decisions.status(), r, "straggler decision");

      std::vector<std::vector<float>> deltas;
      std::vector<Participant> participants;
      std::vector<ErrorFeedback*> fb;
      for (const auto& d : *decisions) {
        if (d.rounds_late > 0 || !d.included) rep.notes.push_back(d.reason);
        if (!d.included) continue;
        deltas.emplace_back(anchor_.size());
        Status st = pseudo_gradient(start[d.site], trainers_[d.site]->parameters(), deltas.back());
        if (!st.ok()) return with_context(st, r, cat("pseudo-gradient of site ", d.site));
        participants.push_back({d.site, d.weight});
        fb.push_back(feedback[d.site]);
      }
      std::vector<float> delta(anchor_.size());
      GEOLOCO_TRY(exchange.run(0, deltas, participants, fb, derive_seed(options_.seed, r), delta, rep));
      const float scale = clip_scale(std::sqrt(squared_norm(delta)), options_.outer.clip_norm);
      Status st = outer_step(anchor_, momentum_, delta, options_.outer, scale);
      if (!st.ok()) return with_context(st, r, "outer step");

      for (std::uint32_t s = 0; s < n_sites; ++s) rep.steps_counted[s] = rep.steps_dropped[s] = 0;
      for (const auto& d : *decisions) {
        (d.included ? rep.steps_counted : rep.steps_dropped)[d.site] = steps_pending[d.site];
        if (d.included) {
          rep.participants.push_back(d.site);
          rep.weights.push_back(d.weight);
        }
        // Counted or dropped, the site restarts from the new anchor.
        GEOLOCO_TRY(merge_fragment(trainers_[d.site]->parameters(), anchor_, options_.streaming.alpha));
        start[d.site] = anchor_;
        start_round[d.site] = r + 1;
        steps_pending[d.site] = tokens_pending[d.site] = 0;
      }
      rep.fragments_synced = {0};
      rep.train_loss = loss_sum / static_cast<double>(std::max<std::uint64_t>(loss_count, 1));
      GEOLOCO_TRY(close_round(std::move(rep), r));
    }
    return {};
  }

  Status run_diloco() {
    auto fragments = partition_fragments(trainers_[0]->layout(), options_.streaming.fragments);
    if (!fragments.ok()) return fragments.status();
    const std::uint32_t n_frag = options_.streaming.fragments;
    const std::uint64_t h = options_.inner_steps;
    // tokens[f][s]: tokens site s processed since fragment f last synced.
    std::vector<std::vector<std::uint64_t>> tokens(n_frag, std::vector<std::uint64_t>(options_.sites, 0));
    std::vector<std::pair<std::uint64_t, std::uint32_t>> merges;  // (due step, fragment)
    const std::vector<ErrorFeedback*> feedback = feedback_pointers();
    Exchange exchange(options_, pipeline_.get(), owner_feedback_.get());
    std::uint64_t syncs = 0;

    for (std::uint64_t r = 1; r <= options_.rounds; ++r) {
      RoundReport rep = new_round(r);
      double loss_sum = 0.0;
      for (std::uint64_t t = (r - 1) * h + 1; t <= r * h; ++t) {
        for (std::uint32_t s = 0; s < options_.sites; ++s) {
          auto step = trainers_[s]->step();
          if (!step.ok()) return with_context(step.status(), r, cat("inner step ", t, " of site ", s));
          loss_sum += step->loss;
          for (auto& per_fragment : tokens) per_fragment[s] += step->tokens;
        }
        // Merges whose overlap of τ steps ends now.
        for (auto it = merges.begin(); it != merges.end();) {
          if (it->first != t) { ++it; continue; }
          GEOLOCO_TRY(merge_all((*fragments)[it->second]));
          it = merges.erase(it);
        }
        for (std::uint32_t f : fragments_due(t, n_frag, h)) {
          const Fragment& frag = (*fragments)[f];
          std::vector<std::vector<float>> deltas(options_.sites, std::vector<float>(frag.length));
          auto anchor_f = std::span<float>(anchor_).subspan(frag.offset, frag.length);
          for (std::uint32_t s = 0; s < options_.sites; ++s) {
            Status st = pseudo_gradient(anchor_f, trainers_[s]->parameters().subspan(frag.offset, frag.length),
                                        deltas[s]);
            if (!st.ok()) return with_context(st, r, cat("pseudo-gradient of site ", s));
          }
          std::vector<float> delta(frag.length);
          GEOLOCO_TRY(exchange.run(frag.offset, deltas, participants_of(tokens[f], options_.weighting), feedback,
                                   derive_seed(options_.seed, ++syncs), delta, rep));
          std::fill(tokens[f].begin(), tokens[f].end(), 0);
          const float scale = clip_scale(std::sqrt(squared_norm(delta)), options_.outer.clip_norm);
          Status st = outer_step(anchor_f, std::span<float>(momentum_).subspan(frag.offset, frag.length), delta,
                                 options_.outer, scale);
          if (!st.ok()) return with_context(st, r, cat("outer step of fragment ", f));
          rep.fragments_synced.push_back(f);
          if (options_.streaming.overlap_steps == 0) {
            GEOLOCO_TRY(merge_all(frag));
          } else {
            merges.emplace_back(t + options_.streaming.overlap_steps, f);
          }
        }
      }
      rep.train_loss = loss_sum / static_cast<double>(h * options_.sites);
      GEOLOCO_TRY(close_round(std::move(rep), r));
    }
    return {};
  }

  Status merge_all(const Fragment& frag) {
    auto global = std::span<const float>(anchor_).subspan(frag.offset, frag.length);
    for (auto& t : trainers_) {
      GEOLOCO_TRY(merge_fragment(t->parameters().subspan(frag.offset, frag.length), global, options_.streaming.alpha));
    }
    return {};
  }

  Status run_data_parallel() {
    const std::size_t n = anchor_size();
    std::vector<std::vector<float>> grads(options_.sites, std::vector<float>(n));
    std::vector<std::uint64_t> tokens(options_.sites);
    std::vector<float> mean(n);
    std::vector<ErrorFeedback*> no_feedback(options_.sites, nullptr);
    // The baseline exchanges raw fp32 gradients, as synchronous data
    // parallelism inside a datacenter would.
    Exchange exchange(options_, nullptr, nullptr);
    std::uint64_t step_no = 0;
    for (std::uint64_t r = 1; r <= options_.rounds; ++r) {
      RoundReport rep = new_round(r);
      double loss_sum = 0.0;
      for (std::uint64_t k = 0; k < options_.inner_steps; ++k) {
        for (std::uint32_t s = 0; s < options_.sites; ++s) {
          auto g = trainers_[s]->gradient(grads[s]);
          if (!g.ok()) return with_context(g.status(), r, cat("gradient of site ", s));
          loss_sum += g->loss;
          tokens[s] = g->tokens;
        }
        GEOLOCO_TRY(exchange.run(0, grads, participants_of(tokens, options_.weighting), no_feedback,
                                 derive_seed(options_.seed, ++step_no), mean, rep));
        for (std::uint32_t s = 0; s < options_.sites; ++s) {
          Status st = trainers_[s]->apply(mean);
          if (!st.ok()) return with_context(st, r, cat("inner update of site ", s));
        }
      }
      std::span<float> replica = trainers_[0]->parameters();
      anchor_.assign(replica.begin(), replica.end());
      rep.train_loss = loss_sum / static_cast<double>(options_.inner_steps * options_.sites);
      auto loss = trainers_[0]->evaluate(anchor_);
      if (!loss.ok()) return loss.status();
      rep.loss = *loss;
      rep.anchor_digest = digest_f32(anchor_);
      report_.rounds.push_back(std::move(rep));
      GEOLOCO_TRY(maybe_checkpoint(r));
    }
    return {};
  }

  const SimulationOptions& options_;
  std::vector<std::unique_ptr<Trainer>> trainers_;
  std::unique_ptr<Pipeline> pipeline_;
  std::vector<std::unique_ptr<ErrorFeedback>> site_feedback_;
  std::unique_ptr<ErrorFeedback> owner_feedback_;
  std::vector<float> anchor_;
  std::vector<float> momentum_;
  SimulationReport report_;
};

}  // namespace

Status SimulationOptions::validate() const {
  GEOLOCO_RETURN_IF(sites < 1 || sites > 1024, Err::invalid_argument, "simulation: sites must be in [1, 1024], got ",
                    sites);
  GEOLOCO_RETURN_IF(rounds < 1, Err::invalid_argument, "simulation: rounds must be at least 1");
  GEOLOCO_RETURN_IF(inner_steps < 1, Err::invalid_argument, "inner.steps (H) must be at least 1");
  GEOLOCO_RETURN_IF(chunk_elements < 1, Err::invalid_argument, "simulation: chunk_elements must be at least 1");
  GEOLOCO_RETURN_IF(!(bandwidth_bits_per_s > 0.0 && std::isfinite(bandwidth_bits_per_s)), Err::invalid_argument,
                    "simulation: bandwidth must be a finite rate > 0 bit/s, got ", bandwidth_bits_per_s);
  GEOLOCO_RETURN_IF(!(rtt_ms >= 0.0 && std::isfinite(rtt_ms)), Err::invalid_argument,
                    "simulation: rtt must be a finite time >= 0 ms, got ", rtt_ms);
  GEOLOCO_TRY(outer.validate());
  GEOLOCO_TRY(streaming.validate(inner_steps));
  GEOLOCO_RETURN_IF(mode == SimulationMode::data_parallel && streaming.fragments != 1, Err::invalid_argument,
                    "simulation: data-parallel mode has no fragments (streaming.fragments must be 1)");
  if (compression) GEOLOCO_TRY(compression::validate(*compression));
  GEOLOCO_TRY(straggler.validate());
  GEOLOCO_RETURN_IF(checkpoint_every_rounds < 1, Err::invalid_argument,
                    "simulation: checkpoint_every_rounds must be at least 1");
  GEOLOCO_RETURN_IF(!(inner_duration_s >= 0.0 && std::isfinite(inner_duration_s)), Err::invalid_argument,
                    "inner.duration must be a finite number of seconds >= 0, got ", inner_duration_s);
  GEOLOCO_RETURN_IF(!site_seconds_per_step.empty() && site_seconds_per_step.size() != sites, Err::invalid_argument,
                    "simulation: site_seconds_per_step has ", site_seconds_per_step.size(), " entries for ", sites,
                    " sites; give one per site or none");
  for (double s : site_seconds_per_step) {
    GEOLOCO_RETURN_IF(!(s > 0.0 && std::isfinite(s)), Err::invalid_argument,
                      "simulation: a site's seconds per step must be finite and > 0, got ", s);
  }
  for (const auto& l : left_out) {
    GEOLOCO_RETURN_IF(l.site >= sites || l.round < 1 || l.round > rounds, Err::invalid_argument,
                      "simulation: left_out names site ", l.site, " in round ", l.round, "; sites are 0..",
                      sites - 1, " and rounds 1..", rounds);
  }
  const bool round_based = streaming.fragments == 1 && streaming.overlap_steps == 0;
  GEOLOCO_RETURN_IF((!left_out.empty() || inner_duration_s > 0.0) && (!round_based || mode != SimulationMode::diloco),
                    Err::invalid_argument,
                    "simulation: stragglers (left_out) and time-based inner phases (inner.duration) are simulated "
                    "for DiLoCo with streaming.fragments = 1 and streaming.overlap = 0 only");
  if (!make_trainer) GEOLOCO_TRY(trainer.validate());
  return {};
}

double modelled_exchange_seconds(std::uint64_t max_site_bytes, double bandwidth_bits_per_s, double rtt_ms) {
  // Two WAN latencies (reduce-scatter, then all-gather) plus the busiest
  // site's bytes at link rate; both phases' bytes are in max_site_bytes.
  return 2.0 * rtt_ms / 1000.0 + static_cast<double>(max_site_bytes) * 8.0 / bandwidth_bits_per_s;
}

Result<SimulationReport> simulate(const SimulationOptions& options) { return Simulation(options).run(); }

Status apply_job_config(const OuterJobConfig& config, SimulationOptions& options) {
  GEOLOCO_TRY(config.validate());
  options.inner_steps = config.inner.steps;
  options.inner_duration_s = config.inner.duration_s;
  options.straggler = config.straggler;
  options.outer = config.outer;
  options.weighting = config.weighting;
  options.streaming = config.streaming;
  return {};
}

}  // namespace geoloco::outer::sim
