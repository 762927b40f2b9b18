// `geoloco simulate`: a whole job's federation in one process, computing
// what geolocod computes. Each simulated site runs the job's own built-in
// trainer (the real SyncedTraining and inner::Trainer, on its data shard,
// with the arguments geolocod would start it with) on its own thread, behind
// a simulated daemon (site.h). The rounds follow geolocod's rules from
// diloco/: the participants in name order, the weights of the straggler
// rule, the exchange of the two-phase all-reduce (exchange.h: the same
// codecs, seeds, error feedback and fp32 sums), the outer step and its
// clipping, Streaming DiLoCo's one fragment per round. Only the network is
// replaced, by a cost model of the link (common/wan_model.h): 3·RTT + the
// busiest site's bytes at link rate per round.
//
// So a fault-free job simulated here ends on the anchor digest a federation
// of geolocod daemons on loopback commits for the same job file, bit for bit
// (tested by e2e_simulate_equals_federation). Every site takes part in every round, as
// in a federation whose rounds wait for all sites; stragglers, deaths and
// restarts are the daemons' to show (tests/e2e, the fault scenarios).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "compression/pipeline_spec.h"
#include "diloco/outer_step.h"
#include "diloco/straggler.h"
#include "inner/train/train_command.h"

namespace geoloco::sim {

struct SimulatedSiteOptions {
  std::string name;             ///< as in the job's `sites`
  inner::TrainCommand command;  ///< its trainer's command line, parsed (geoloco-train's parser)
  /// Modelled seconds per inner step: the trainer's clock, which ends
  /// time-based phases (inner.duration); unused with step-based ones.
  double seconds_per_step = 1.0;
};

struct FederationOptions {
  std::string job;
  std::vector<SimulatedSiteOptions> sites;  ///< in the job's order (data shards follow it)
  std::string coordinator;                  ///< its trainer supplies the initialization
  std::uint64_t rounds = 1;                 ///< the last round (streaming: stop.rounds × F)
  std::uint32_t fragments = 1;              ///< Streaming DiLoCo's F
  std::uint64_t inner_steps = 0;            ///< H as READY reports it
  diloco::OuterOptimizerOptions outer;
  diloco::Weighting weighting = diloco::Weighting::tokens;
  diloco::StragglerOptions straggler;
  compression::PipelineSpec pipeline;      ///< the job's codec chain
  std::uint64_t seed = 0;                  ///< the job's seed
  std::uint64_t chunk_elements = 1 << 18;  ///< the sites' transport.chunk_elements
  double bandwidth_bits_per_s = 1e9;       ///< each site's link, > 0
  double rtt_ms = 100;                     ///< between sites, >= 0
  /// Where the coordinator's trainer logs the evaluation of every anchor
  /// (its --eval-log); empty: no evaluation.
  std::string eval_log;
  /// After each of these rounds every site's error-feedback residual is
  /// emptied, as after a crash of every site whose state was rebuilt from
  /// the round log (the residual is not in it): what that loses in loss is
  /// this run's against one without.
  std::vector<std::uint64_t> residual_lost_after;

  /// Errors: invalid_argument naming the rule.
  Status validate() const;
};

struct RoundReport {
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;
  std::vector<std::string> participants;  ///< plan order (by name)
  std::vector<double> weights;            ///< same order
  std::uint64_t tokens = 0;               ///< of the round's contributions
  double train_loss = 0;                  ///< the participants' weighted mean training loss (the plan's)
  std::vector<std::uint64_t> bytes_sent;  ///< per participant (plan order), frame bytes of the exchange
  std::uint64_t payload_bytes = 0;        ///< encoded contributions, all participants
  std::uint64_t raw_bytes = 0;            ///< the same as fp32
  double exchange_seconds = 0;            ///< modelled on the link
  std::string anchor_digest;              ///< after the round, 16 hex digits (as geolocod shows it)
};

struct FederationReport {
  std::vector<RoundReport> rounds;
  /// Eval loss of the anchor after round r (r = 0: the initialization), from
  /// the coordinator's trainer (empty without an eval log).
  std::map<std::uint64_t, double> eval_loss;
  std::map<std::uint64_t, double> accuracy;  ///< mlp only
  std::uint64_t parameters = 0;
  std::string initial_digest;          ///< the coordinator's initialization
  std::string anchor_digest;           ///< after the last round
  std::vector<float> anchor;           ///< the final anchor
  std::uint64_t total_bytes_sent = 0;  ///< Σ sites Σ rounds
  double total_exchange_seconds = 0;
};

/// Runs the job. `on_round` (may be empty) is called after every round, on
/// the calling thread. Errors: invalid_argument (options), any site's
/// trainer's (named), the exchange's or the outer step's (with the round).
Result<FederationReport> run_federation(const FederationOptions& options,
                                        const std::function<void(const RoundReport&)>& on_round = {});

}  // namespace geoloco::sim
