// The in-process simulator (issue 3): a whole job with N simulated sites in
// one process. Each site has its own Trainer, the real compression pipeline
// with error feedback, and the real outer engine (aggregator, outer
// optimizer, streaming fragments); only the network is replaced by memory,
// and its cost is modelled instead.
//
// The exchange is DESIGN §3's two-phase all-reduce. Chunk i of a fragment is
// owned by site i mod N. (1) Reduce-scatter: every site encodes its chunks
// of g_s = Δ_s + e_s and "sends" those it does not own to their owners, which
// decode and reduce them in site order (aggregator.h). (2) All-gather: the
// owner encodes the reduced chunk (with its own error feedback on that
// range) and sends it to the N − 1 others; every site decodes the same bytes.
// A site therefore sends about (N − 1)/N of its payload twice, and a sync is
// modelled as taking 2·RTT + max_s(bytes_s)·8 / bandwidth.
//
// Data-parallel mode is the baseline DiLoCo is measured against: every inner
// step the sites' gradients are averaged (raw fp32, same two-phase exchange)
// and each site applies the average with its inner optimizer.
//
// Single-threaded and deterministic: the same options give the same report,
// bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "compression/chunked.h"
#include "compression/pipeline_spec.h"
#include "outer/fragments.h"
#include "outer/job_yaml.h"
#include "outer/outer_optimizer.h"
#include "outer/sim/least_squares_trainer.h"
#include "outer/sim/trainer.h"
#include "outer/straggler.h"

namespace geoloco::outer::sim {

/// A site that misses the PLAN of a round (a straggler), as data.
struct SiteRound {
  std::uint32_t site = 0;
  std::uint64_t round = 0;  ///< 1-based
};

enum class SimulationMode {
  diloco,         ///< H inner steps per site, then a (streaming) outer sync
  data_parallel,  ///< synchronous data parallelism: gradients averaged every step
};

struct SimulationOptions {
  std::string job = "simulation";  ///< a name for the report
  SimulationMode mode = SimulationMode::diloco;
  std::uint32_t sites = 4;         ///< N simulated sites, 1..1024
  std::uint64_t rounds = 20;       ///< outer rounds; each is H inner steps on every site
  std::uint64_t inner_steps = 50;  ///< H: inner steps per round (per fragment sync period)
  OuterOptimizerOptions outer;     ///< η, μ, clipping (DiLoCo mode only)
  StreamingOptions streaming;      ///< F, τ, α; the default (F = 1) is plain DiLoCo
  Weighting weighting = Weighting::tokens;  ///< contribution weights
  /// The codec chain for the exchange; nullopt sends raw fp32 (4 bytes per value).
  std::optional<compression::PipelineSpec> compression;
  std::uint64_t chunk_elements = compression::kDefaultChunkElements;  ///< values per chunk (frame), >= 1
  double bandwidth_bits_per_s = 1e9;  ///< each site's link rate, bit/s, > 0
  double rtt_ms = 100.0;              ///< round-trip time between sites, ms, >= 0
  std::uint64_t seed = 1;             ///< keys stochastic rounding and the arrival shuffle
  /// Non-zero: deliver phase-1 chunks in a random order keyed by this seed
  /// instead of site by site. The anchors must not change (a determinism
  /// check); 0 keeps site order.
  std::uint64_t arrival_shuffle_seed = 0;
  /// Time budget of each inner phase in seconds (DESIGN's inner.duration);
  /// 0 runs inner_steps. With a budget, site s runs
  /// planned_inner_steps(duration, site_seconds_per_step[s]) steps a round.
  double inner_duration_s = 0.0;
  /// Modelled seconds per inner step of each site (empty: 1 s for all).
  std::vector<double> site_seconds_per_step;
  /// Sites left out of rounds' PLANs. A left-out site keeps training from
  /// the anchor it had and reports its accumulated Δ when next included,
  /// under `straggler`'s policy (carry or drop).
  std::vector<SiteRound> left_out;
  StragglerOptions straggler;         ///< policy, decay, max_rounds_late
  /// Non-empty: save the outer state (anchor, momentum, every site's
  /// residual as "site-<s>") there every `checkpoint_every_rounds` rounds and
  /// after the last, atomically, as a real daemon would (checkpoint.h).
  std::string checkpoint_path;
  std::uint64_t checkpoint_every_rounds = 10;  ///< >= 1
  std::string config_hash;            ///< recorded in checkpoints (e.g. a digest of the job file)
  /// The site trainers; when empty, LeastSquaresTrainers built from `trainer`.
  TrainerFactory make_trainer;
  LeastSquaresOptions trainer;        ///< used when make_trainer is empty

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

struct RoundReport {
  std::uint64_t round = 0;       ///< 1-based
  std::uint64_t inner_step = 0;  ///< the most inner steps any site has completed by the end of the round
  std::vector<std::uint32_t> fragments_synced;  ///< in DiLoCo mode; every fragment once per round
  std::vector<std::uint32_t> participants;      ///< sites whose Δ joined this round, in site order
  std::vector<double> weights;                  ///< their aggregation weights, same order
  std::vector<std::uint64_t> site_inner_steps;  ///< steps each site ran this round
  /// Per site: inner steps whose work joined this round's Δ (with carry, a
  /// late site's earlier rounds too), and steps whose work was dropped.
  std::vector<std::uint64_t> steps_counted;
  std::vector<std::uint64_t> steps_dropped;
  std::vector<std::string> notes;               ///< straggler decisions for late or dropped sites
  double loss = 0.0;             ///< evaluation loss of the anchor (DP: of the replicas) after the round
  double train_loss = 0.0;       ///< mean minibatch loss over the round's steps and sites
  std::vector<std::uint64_t> bytes_sent;  ///< per site, this round, both phases
  std::uint64_t payload_bytes = 0;  ///< Σ over sites of their encoded phase-1 payloads (all chunks)
  std::uint64_t raw_bytes = 0;      ///< Σ over sites of 4 × values exchanged: the uncompressed size
  double exchange_seconds = 0.0;    ///< modelled time of the round's syncs on the link
  std::uint64_t anchor_digest = 0;  ///< xxh3-64 of the anchor (DP: of site 0's replica)
};

struct SimulationReport {
  std::vector<RoundReport> rounds;
  double initial_loss = 0.0;        ///< evaluation loss of the initial parameters
  double final_loss = 0.0;          ///< evaluation loss after the last round
  std::uint64_t total_bytes_sent = 0;  ///< Σ sites Σ rounds
  double total_exchange_seconds = 0.0;
  std::vector<float> anchor;        ///< the final anchor (DP: site 0's replica)
  std::uint64_t anchor_digest = 0;
};

/// Runs the job. Errors: invalid_argument (options), and any error a
/// trainer, the pipeline or the outer engine returns (e.g. non_finite when a
/// trainer diverges), with the round and site in the message.
Result<SimulationReport> simulate(const SimulationOptions& options);

/// Copies a job file's outer-engine settings into `options`: inner.steps (H)
/// and inner.duration, the outer optimizer, the weighting, streaming and the
/// straggler policy. Errors: invalid_argument (config.validate()'s rules).
Status apply_job_config(const OuterJobConfig& config, SimulationOptions& options);

/// The modelled time of one two-phase exchange in which the busiest site
/// sends `max_site_bytes`: 2·RTT + bytes·8 / bandwidth, in seconds.
double modelled_exchange_seconds(std::uint64_t max_site_bytes, double bandwidth_bits_per_s, double rtt_ms);

}  // namespace geoloco::outer::sim
