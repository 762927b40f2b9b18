// The metrics a site exports (daemon/metrics.h renders them for Prometheus):
// every name declared once, with its help text, and what a committed round
// adds to them. The names follow docs/design.md §7's rules: `geoloco_`
// prefix, base units, `_total` counters.
#pragma once

#include <string>

#include "daemon/job_status.h"
#include "daemon/metrics.h"

namespace geoloco::daemon {

/// Declares every metric of a site (jobs, rounds, transfers, peers, refusals).
void declare_site_metrics(Metrics& metrics);

/// What committed round `record` of `job` adds: the round counters, tokens
/// and stragglers summed, the round's gauges (participants, loss, compression
/// ratio, compute, waiting and exchange seconds) set.
void show_committed_round(Metrics& metrics, const std::string& job, const RoundRecord& record);
/// A round's costs by stage (round_costs.h): the last round's gauges and the totals.
void show_round_costs(Metrics& metrics, const std::string& job, const RoundCosts& costs);

}  // namespace geoloco::daemon
