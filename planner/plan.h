// The planner's model: what a DiLoCo job (and data parallelism, its
// baseline) will cost on given sites and links, before anything runs.
// Pure functions of the inputs; `geoloco plan` reads them from its command
// line and prints the result (cli/plan_command.cpp).
//
// The model (planner/README.md says why each choice):
//   - A round syncs one fragment of P/F parameters, 4 bytes each, divided by
//     the compression ratio r: w = 4·P / (F·r) bytes on the wire.
//   - The two-phase all-reduce sends w/k to every other site in each phase:
//     a site sends 2·(k−1)/k·w per round, a pair carries 2·w/k each way.
//   - The exchange takes 3·RTT (the slowest pair's: geolocod's READY and
//     PLAN, the all-reduce's two one-way phases, the commit vote and
//     COMMITTED) plus the longest transfer: a site's bytes over its own
//     link, or a pair's bytes over the pair's own bandwidth where one is
//     given. This is the link model of `geoloco simulate` (sim/README.md).
//   - A round computes H/F steps of the slowest site's step time; the
//     exchange hides behind τ of the next round's steps (Streaming DiLoCo's
//     overlap), so a round lasts (H/F)·s + max(0, exchange − τ·s).
//   - Data parallelism all-reduces 4·P bytes of fp32 gradients after every
//     step, with no overlap of compute and communication and no
//     coordinator: 2·RTT plus the transfer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::planner {

/// One site: its name and its link to the WAN (bit/s, > 0).
struct SitePlan {
  std::string name;
  double bandwidth = 1e9;
};

/// What is known of the path between two sites: its RTT, and a bandwidth
/// below the sites' own links (0 = none: only the sites' links bound it).
struct PairPlan {
  std::string a, b;
  double rtt_ms = 100.0;
  double bandwidth = 0.0;
};

struct PlanInput {
  double parameters = 0;        ///< P, the model's parameter count
  double step_seconds = 0;      ///< the slowest site's seconds per inner step
  double tokens_per_step = 0;   ///< tokens one site trains on per inner step (0: no token figures)
  std::vector<SitePlan> sites;  ///< at least 2
  double rtt_ms = 100.0;        ///< RTT of every pair not listed in pairs
  std::vector<PairPlan> pairs;  ///< per-pair RTT and bandwidth, overriding rtt_ms
  std::uint64_t h = 500;        ///< inner steps per phase (F rounds of H/F steps with Streaming DiLoCo)
  std::uint32_t fragments = 1;  ///< Streaming DiLoCo's F (1: plain DiLoCo)
  std::uint64_t overlap = 0;    ///< τ: steps an exchange overlaps (< H; at most H/F when F > 1)
  double compression = 4.0;     ///< fp32 bytes over wire bytes (int8 + zstd: about 4)
  double tokens = 0;            ///< tokens to train (0: no time-to-train figure)
  double target = 0.95;         ///< compute utilization below which the plan warns

  /// Errors: invalid_argument naming the first bad input.
  Status validate() const;
};

/// The figures of one way of training (DiLoCo or data parallelism).
struct Figures {
  double round_seconds = 0;             ///< one round (data parallelism: one step)
  double compute_seconds = 0;           ///< compute in it
  double exchange_seconds = 0;          ///< the exchange's duration (hidden or not)
  double stall_seconds = 0;             ///< what of it the compute does not hide
  double utilization = 0;               ///< compute / round
  double bytes_per_site = 0;            ///< sent by each site per round
  double bytes_per_pair = 0;            ///< carried each way by each pair per round
  double bytes_per_token = 0;           ///< a site's bytes over the tokens all sites train in a round (0: unknown)
  std::optional<double> train_seconds;  ///< wall-clock to train PlanInput::tokens
};

/// The link that sets an exchange's duration.
struct Bottleneck {
  std::string link;             ///< "site-3's link" or "the path site-1 - site-4"
  double bandwidth = 0;         ///< its bit/s
  double transfer_seconds = 0;  ///< its bytes at that rate
};

/// The daemon's CPU per round per GB of the fp32 values a round syncs, as
/// bench/scale.py measured it (bench/RESULTS.md, "A round at scale"): each
/// site's geolocod, every stage (encode, transfer with TLS, decode and
/// average, digest, round log, outer step), uncapped, 256 Mi parameters, 3
/// sites sharing a 2-core machine: the median of rounds 2-4 of its linked
/// and uncapped runs. With a lossy codec (compression > 1) the q8 + zstd
/// figure with error feedback; raw fp32 otherwise.
inline constexpr double kDaemonCoreSecondsPerGbCompressed = 2.4;
inline constexpr double kDaemonCoreSecondsPerGbRaw = 4.1;
inline constexpr const char* kDaemonCostSource =
    "bench/scale.py: 256 Mi parameters, 3 sites on 2 cores, linked and uncapped (bench/RESULTS.md)";

/// What geolocod needs at each site for this model (docs/design.md §10).
struct SiteResources {
  double ram_bytes_between_rounds = 0;    ///< anchor, momentum and, with compression, the residual: 12 (8) B/param
  double ram_bytes_in_round = 0;          ///< + the averaged Δ held as its wire bytes until it commits
  double checkpoint_bytes = 0;            ///< a checkpoint: the state between rounds
  double round_log_bytes_per_round = 0;   ///< the averaged Δ each round appends to the round log
  double cpu_core_seconds_per_round = 0;  ///< from the measured per-GB cost
  double cores_to_keep_up = 0;            ///< that CPU over the exchange's transfer on its bottleneck link
};

struct Plan {
  Figures diloco;
  SiteResources site;  ///< geolocod's host RAM, disk and CPU
  Figures data_parallel;
  Bottleneck bottleneck;              ///< of DiLoCo's exchange
  double rtt_ms = 0;                  ///< the slowest pair's RTT
  std::vector<std::string> warnings;  ///< each names the link and what to change
};

/// The plan of `in`. Errors: in.validate()'s.
Result<Plan> make_plan(const PlanInput& in);

/// DiLoCo's figures alone (no warnings): make_plan's arithmetic, for the
/// remedies it searches (a larger H, more compression, more fragments).
/// `in` must be valid (in.validate()).
Figures diloco_figures(const PlanInput& in);

/// The most fragments a remedy proposes.
inline constexpr std::uint64_t kMostFragments = 64;

}  // namespace geoloco::planner
