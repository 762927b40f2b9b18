// Who counts in a round, and how much: pure decision functions, no clocks,
// no I/O. The coordinator calls them when it writes a PLAN, a site's
// participant machine (late_work) when it decides whether its late phase
// goes out as READY, and the simulator as geolocod does; tests call them
// with fixed inputs and check weights and reasons.
//
// A contribution is a site's accumulated Δ since the anchor it started from.
// On time, it counts with weight w = tokens (or 1). A straggler left out of
// earlier PLANs keeps training from its old anchor; when it finally reports:
//   carry: its Δ joins the current round with w × decay^rounds_late, so none
//          of its inner steps are lost, only discounted;
//   drop:  its Δ is discarded (the reason says how many steps and tokens, so
//          the log never loses work silently) and it restarts from the anchor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::diloco {

/// How a contribution's base weight is set.
enum class Weighting {
  tokens,   ///< w = tokens processed in the inner phase (fast sites count more)
  uniform,  ///< w = 1 for every site
};

enum class StragglerPolicy { carry, drop };

struct StragglerOptions {
  /// carry: late work joins a later round, discounted; drop: late work is discarded.
  StragglerPolicy policy = StragglerPolicy::carry;
  /// Weight multiplier per round of lateness under carry, in (0, 1].
  double decay = 0.5;
  /// Under carry, a contribution later than this many rounds is dropped
  /// anyway (its Δ is from an anchor too old to help). At least 1.
  std::uint64_t max_rounds_late = 16;

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

/// What becomes of work trained from an anchor `rounds_late` rounds older
/// than the round it would join: the rule the coordinator's weights and a
/// site's READY both follow. On time (0 rounds late) it counts in full.
/// Late, it is carried under `carry` up to max_rounds_late rounds, and
/// dropped otherwise; with Streaming DiLoCo (fragments > 1) late work is
/// always dropped: the next round syncs another fragment, so it cannot join.
enum class LateWork { on_time, carry, drop };
LateWork late_work(std::uint64_t rounds_late, const StragglerOptions& options, std::uint32_t fragments = 1);

/// What one site brings to a round.
struct Contribution {
  std::uint32_t site = 0;          ///< site index in the job
  std::uint64_t anchor_round = 0;  ///< the round whose anchor θ this Δ starts from
  std::uint64_t inner_steps = 0;   ///< inner steps accumulated since that anchor
  std::uint64_t tokens = 0;        ///< tokens processed in those steps
};

struct ContributionDecision {
  std::uint32_t site = 0;
  bool included = false;
  double weight = 0.0;            ///< 0 when not included
  std::uint64_t rounds_late = 0;  ///< round − anchor_round
  std::string reason;             ///< for the log: why this weight
};

/// The decision for one contribution to round `round`. Errors:
/// invalid_argument (a contribution from a future round, or zero tokens
/// under token weighting, or options breaking validate()).
Result<ContributionDecision> decide_contribution(const Contribution& c, std::uint64_t round, Weighting weighting,
                                                 const StragglerOptions& options);

/// The decisions for every contribution of a round, in site order. Errors:
/// as decide_contribution, and invalid_argument when a site appears twice or
/// nothing is included (a round needs at least one weight > 0).
Result<std::vector<ContributionDecision>> decide_round(std::span<const Contribution> contributions, std::uint64_t round,
                                                       Weighting weighting, const StragglerOptions& options);

/// What a site reports of its inner phase, as its READY carries it: at least
/// one token (token weighting never sees zero) and a finite loss (0 when the
/// trainer's was not finite).
struct ReportedWork {
  std::uint64_t tokens = 1;
  double loss = 0;
};
ReportedWork reported_work(std::uint64_t tokens, double loss);

/// A round's plan from its decisions: the included sites in name order (the
/// all-reduce's order on every site) with their weights, the sum of their
/// tokens and their weight-averaged loss, summed in that order; the sites
/// left out, in name order. `names` and `work` are by site index.
struct OrderedPlan {
  std::vector<std::uint32_t> participants;
  std::vector<double> weights;
  std::vector<std::uint32_t> left_out;
  std::uint64_t tokens = 0;
  double loss = 0;
};
OrderedPlan order_plan(std::span<const ContributionDecision> decisions, std::span<const std::string> names,
                       std::span<const ReportedWork> work);

}  // namespace geoloco::diloco
