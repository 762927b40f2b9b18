#include "diloco/straggler.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace geoloco::diloco {

Status StragglerOptions::validate() const {
  GEOLOCO_RETURN_IF(!(decay > 0.0 && decay <= 1.0), Err::invalid_argument, "straggler.decay must be in (0, 1], got ",
                    decay);
  GEOLOCO_RETURN_IF(max_rounds_late < 1, Err::invalid_argument, "straggler.max_rounds_late must be at least 1, got ",
                    max_rounds_late);
  return {};
}

LateWork late_work(std::uint64_t rounds_late, const StragglerOptions& options, std::uint32_t fragments) {
  if (rounds_late == 0) return LateWork::on_time;
  if (fragments > 1 || options.policy == StragglerPolicy::drop || rounds_late > options.max_rounds_late)
    return LateWork::drop;
  return LateWork::carry;
}

Result<ContributionDecision> decide_contribution(const Contribution& c, std::uint64_t round, Weighting weighting,
                                                 const StragglerOptions& options) {
  GEOLOCO_TRY(options.validate());
  GEOLOCO_RETURN_IF(c.anchor_round > round, Err::invalid_argument, "site ", c.site, " reports a Δ from anchor ",
                    c.anchor_round, " in round ", round, ": contributions cannot come from a future round");
  GEOLOCO_RETURN_IF(weighting == Weighting::tokens && c.tokens == 0 && c.inner_steps > 0, Err::invalid_argument,
                    "site ", c.site, " ran ", c.inner_steps,
                    " inner steps but reports 0 tokens; token weighting needs the token count");
  ContributionDecision d;
  d.site = c.site;
  d.rounds_late = round - c.anchor_round;
  if (c.inner_steps == 0) {
    d.reason = cat("site ", c.site, ": no inner steps since anchor ", c.anchor_round, ", nothing to add");
    return d;
  }
  const double base = weighting == Weighting::tokens ? static_cast<double>(c.tokens) : 1.0;
  const LateWork fate = late_work(d.rounds_late, options);
  if (fate == LateWork::on_time) {
    d.included = true;
    d.weight = base;
    d.reason =
        cat("site ", c.site, ": on time, weight ", base, weighting == Weighting::tokens ? " (tokens)" : " (uniform)");
    return d;
  }
  const std::string work = cat(c.inner_steps, " inner steps, ", c.tokens, " tokens");
  if (fate == LateWork::drop && options.policy == StragglerPolicy::drop) {
    d.reason = cat("site ", c.site, ": ", d.rounds_late, " round(s) late, policy drop: discarding ", work,
                   "; the site restarts from anchor ", round);
    return d;
  }
  if (fate == LateWork::drop) {
    d.reason = cat("site ", c.site, ": ", d.rounds_late, " rounds late, over max_rounds_late ", options.max_rounds_late,
                   ": discarding ", work, "; the site restarts from anchor ", round);
    return d;
  }
  // decay^k by repeated multiplication: the same bits on every machine,
  // unlike std::pow whose last bit may differ between libm versions.
  double factor = 1.0;
  for (std::uint64_t k = 0; k < d.rounds_late; ++k) factor *= options.decay;
  d.included = true;
  d.weight = base * factor;
  d.reason = cat("site ", c.site, ": ", d.rounds_late, " round(s) late, policy carry: ", work, " join with weight ",
                 base, " x ", options.decay, "^", d.rounds_late, " = ", d.weight);
  return d;
}

Result<std::vector<ContributionDecision>> decide_round(std::span<const Contribution> contributions, std::uint64_t round,
                                                       Weighting weighting, const StragglerOptions& options) {
  std::vector<Contribution> sorted(contributions.begin(), contributions.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.site < b.site; });
  std::vector<ContributionDecision> out;
  std::set<std::uint32_t> seen;
  bool any = false;
  for (const auto& c : sorted) {
    GEOLOCO_RETURN_IF(!seen.insert(c.site).second, Err::invalid_argument, "round ", round, ": site ", c.site,
                      " contributes twice; one contribution per site per round");
    auto d = decide_contribution(c, round, weighting, options);
    if (!d.ok()) return d.status();
    any = any || d->included;
    out.push_back(std::move(d).value());
  }
  GEOLOCO_RETURN_IF(!any, Err::invalid_argument, "round ", round,
                    ": no contribution is included; a round needs at least one weight > 0");
  return out;
}

ReportedWork reported_work(std::uint64_t tokens, double loss) {
  return {std::max<std::uint64_t>(tokens, 1), std::isfinite(loss) ? loss : 0.0};
}

OrderedPlan order_plan(std::span<const ContributionDecision> decisions, std::span<const std::string> names,
                       std::span<const ReportedWork> work) {
  std::vector<const ContributionDecision*> by_name;
  for (const auto& d : decisions) by_name.push_back(&d);
  std::sort(by_name.begin(), by_name.end(), [&](auto* a, auto* b) { return names[a->site] < names[b->site]; });
  OrderedPlan plan;
  double weight_sum = 0, loss_sum = 0;
  for (const auto* d : by_name) {
    if (!d->included) {
      plan.left_out.push_back(d->site);
      continue;
    }
    plan.participants.push_back(d->site);
    plan.weights.push_back(d->weight);
    plan.tokens += work[d->site].tokens;
    weight_sum += d->weight;
    loss_sum += d->weight * work[d->site].loss;
  }
  plan.loss = weight_sum > 0 ? loss_sum / weight_sum : 0;
  return plan;
}

}  // namespace geoloco::diloco
