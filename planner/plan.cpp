#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/status.h"
#include "common/wan_model.h"

namespace geoloco::planner {

namespace {

std::string seconds_text(double s) {
  if (s < 1) return cat(std::lround(s * 1000), " ms");
  if (s < 100) return cat(std::round(s * 10) / 10, " s");
  return cat(std::lround(s), " s");
}

std::string rate_text(double bits_per_s) {
  if (bits_per_s >= 1e9) return cat(bits_per_s / 1e9, " Gbit/s");
  if (bits_per_s >= 1e6) return cat(bits_per_s / 1e6, " Mbit/s");
  return cat(bits_per_s / 1e3, " kbit/s");
}

std::string bytes_text(double b) {
  if (b >= 1e9) return cat(std::round(b / 1e7) / 100, " GB");
  if (b >= 1e6) return cat(std::round(b / 1e4) / 100, " MB");
  if (b >= 1e3) return cat(std::lround(b / 1e3), " kB");
  return cat(std::lround(b), " B");
}

/// A fraction as a percentage rounded down to 0.1, so a figure just below
/// the target never reads as the target.
double percent_down(double fraction) { return std::floor(fraction * 1000) / 10; }

double slowest_rtt_ms(const PlanInput& in) {
  const std::size_t k = in.sites.size();
  double rtt = 0;
  for (const auto& p : in.pairs) rtt = std::max(rtt, p.rtt_ms);
  // Pairs the input does not list keep the default RTT.
  if (in.pairs.size() < k * (k - 1) / 2) rtt = std::max(rtt, in.rtt_ms);
  return rtt;
}

/// The exchange of `wire` bytes (one round's payload of one site) by the
/// two-phase all-reduce: its duration and the link that sets it.
std::pair<double, Bottleneck> exchange(const PlanInput& in, double wire, double round_trips) {
  const double k = static_cast<double>(in.sites.size());
  const double site_bytes = 2 * (k - 1) / k * wire;
  const double pair_bytes = 2 * wire / k;
  Bottleneck worst;
  for (const auto& s : in.sites) {
    const double t = site_bytes * 8 / s.bandwidth;
    if (t > worst.transfer_seconds) worst = {cat(s.name, "'s link"), s.bandwidth, t};
  }
  for (const auto& p : in.pairs) {
    if (p.bandwidth <= 0) continue;
    const double t = pair_bytes * 8 / p.bandwidth;
    if (t > worst.transfer_seconds) worst = {cat("the path ", p.a, " - ", p.b), p.bandwidth, t};
  }
  // common/wan_model.h's model, with each link's own rate.
  return {round_trips * slowest_rtt_ms(in) / 1000 + worst.transfer_seconds, worst};
}

Figures figures(const PlanInput& in, double wire, double round_trips, double compute_steps, double hidden_steps) {
  const double k = static_cast<double>(in.sites.size());
  Figures f;
  f.compute_seconds = compute_steps * in.step_seconds;
  f.exchange_seconds = exchange(in, wire, round_trips).first;
  f.stall_seconds = std::max(0.0, f.exchange_seconds - hidden_steps * in.step_seconds);
  f.round_seconds = f.compute_seconds + f.stall_seconds;
  f.utilization = f.compute_seconds / f.round_seconds;
  f.bytes_per_site = 2 * (k - 1) / k * wire;
  f.bytes_per_pair = 2 * wire / k;
  const double round_tokens = k * compute_steps * in.tokens_per_step;
  if (round_tokens > 0) {
    f.bytes_per_token = f.bytes_per_site / round_tokens;
    if (in.tokens > 0) f.train_seconds = std::ceil(in.tokens / round_tokens) * f.round_seconds;
  }
  return f;
}

Figures data_parallel_figures(const PlanInput& in) {
  return figures(in, 4 * in.parameters, kDataParallelRoundTrips, 1, 0);
}

}  // namespace

Status PlanInput::validate() const {
  GEOLOCO_RETURN_IF(!(parameters >= 1 && std::isfinite(parameters)), Err::invalid_argument,
                    "plan: the model needs at least one parameter, got ", parameters);
  GEOLOCO_RETURN_IF(!(step_seconds > 0 && std::isfinite(step_seconds)), Err::invalid_argument,
                    "plan: a site's step time must be > 0 seconds, got ", step_seconds);
  GEOLOCO_RETURN_IF(!(tokens_per_step >= 0 && tokens >= 0 && std::isfinite(tokens_per_step) && std::isfinite(tokens)),
                    Err::invalid_argument, "plan: token counts must be finite and not negative");
  GEOLOCO_RETURN_IF(tokens > 0 && tokens_per_step == 0, Err::invalid_argument,
                    "plan: a time to train needs the tokens a site trains on per step (--tokens-per-step)");
  GEOLOCO_RETURN_IF(sites.size() < 2 || sites.size() > 10000, Err::invalid_argument,
                    "plan: DiLoCo needs 2 to 10000 sites, got ", sites.size());
  std::set<std::string> names;
  for (const auto& s : sites) {
    GEOLOCO_RETURN_IF(s.name.empty() || !names.insert(s.name).second, Err::invalid_argument,
                      "plan: every site needs its own name; '", s.name, "' is empty or given twice");
    GEOLOCO_RETURN_IF(!(s.bandwidth > 0 && std::isfinite(s.bandwidth)), Err::invalid_argument, "plan: ", s.name,
                      "'s link must be faster than 0 bit/s");
  }
  GEOLOCO_RETURN_IF(!(rtt_ms >= 0 && std::isfinite(rtt_ms)), Err::invalid_argument,
                    "plan: the RTT must be a finite number of ms, not negative; got ", rtt_ms);
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& p : pairs) {
    GEOLOCO_RETURN_IF(!names.contains(p.a) || !names.contains(p.b) || p.a == p.b, Err::invalid_argument,
                      "plan: the path ", p.a, " - ", p.b, " does not join two of the sites");
    GEOLOCO_RETURN_IF(!seen.insert(std::minmax(p.a, p.b)).second, Err::invalid_argument, "plan: the path ", p.a, " - ",
                      p.b, " is given twice");
    GEOLOCO_RETURN_IF(!(p.rtt_ms >= 0 && p.bandwidth >= 0 && std::isfinite(p.rtt_ms) && std::isfinite(p.bandwidth)),
                      Err::invalid_argument, "plan: the path ", p.a, " - ", p.b,
                      " needs a finite RTT and bandwidth, neither negative");
  }
  GEOLOCO_RETURN_IF(h < 1, Err::invalid_argument, "plan: H must be at least 1 step");
  GEOLOCO_RETURN_IF(fragments < 1 || fragments > h, Err::invalid_argument, "plan: fragments must be between 1 and H (",
                    h, "), got ", fragments);
  GEOLOCO_RETURN_IF(overlap >= h, Err::invalid_argument, "plan: the overlap (", overlap,
                    " steps) must be smaller than H (", h, ")");
  GEOLOCO_RETURN_IF(fragments > 1 && overlap > h / fragments, Err::invalid_argument, "plan: the overlap (", overlap,
                    " steps) must be at most H/F = ", h / fragments,
                    ": a fragment's exchange ends before the next syncs");
  GEOLOCO_RETURN_IF(!(compression >= 1 && std::isfinite(compression)), Err::invalid_argument,
                    "plan: the compression ratio (fp32 bytes over wire bytes) must be at least 1, got ", compression);
  GEOLOCO_RETURN_IF(!(target > 0 && target <= 1), Err::invalid_argument,
                    "plan: the utilization target must be in (0, 1], got ", target);
  return {};
}

Figures diloco_figures(const PlanInput& in) {
  const double f = static_cast<double>(in.fragments);
  return figures(in, 4 * in.parameters / (f * in.compression), kRoundTrips, static_cast<double>(in.h) / f,
                 static_cast<double>(in.overlap));
}

SiteResources site_resources(const PlanInput& in, double transfer_seconds) {
  const bool lossy = in.compression > 1;  // a codec that drops bits: with error feedback, a residual
  const double synced = 4 * in.parameters / static_cast<double>(in.fragments);  // fp32 bytes a round syncs
  SiteResources r;
  r.ram_bytes_between_rounds = (lossy ? 12 : 8) * in.parameters;
  r.round_log_bytes_per_round = synced / in.compression;
  r.ram_bytes_in_round = r.ram_bytes_between_rounds + r.round_log_bytes_per_round;
  r.checkpoint_bytes = r.ram_bytes_between_rounds;
  r.cpu_core_seconds_per_round =
      (lossy ? kDaemonCoreSecondsPerGbCompressed : kDaemonCoreSecondsPerGbRaw) * synced / 1e9;
  r.cores_to_keep_up = transfer_seconds > 0 ? r.cpu_core_seconds_per_round / transfer_seconds : 0;
  return r;
}

Result<Plan> make_plan(const PlanInput& in) {
  GEOLOCO_TRY(in.validate());
  Plan plan;
  plan.diloco = diloco_figures(in);
  plan.data_parallel = data_parallel_figures(in);
  plan.rtt_ms = slowest_rtt_ms(in);
  plan.bottleneck = exchange(in, 4 * in.parameters / (in.fragments * in.compression), kRoundTrips).second;
  plan.site = site_resources(in, plan.bottleneck.transfer_seconds);
  const Figures& d = plan.diloco;
  if (d.utilization >= in.target) return plan;

  const Bottleneck& b = plan.bottleneck;
  const double rtt_s = kRoundTrips * plan.rtt_ms / 1000;
  const double hidden = static_cast<double>(in.overlap) * in.step_seconds;
  plan.warnings.push_back(cat("DiLoCo computes ", percent_down(d.utilization), "% of the time, below the target ",
                              std::round(in.target * 1000) / 10, "%: ", b.link, " (", rate_text(b.bandwidth),
                              ") needs ", seconds_text(b.transfer_seconds), " a round for ",
                              bytes_text(b.link.starts_with("the path") ? d.bytes_per_pair : d.bytes_per_site),
                              ", plus ", kRoundTrips, " x RTT = ", seconds_text(rtt_s), ", and ",
                              hidden > 0 ? seconds_text(hidden) : "none",
                              " of it hides behind the next round's compute"));

  // A round of compute c keeps the target u when its stall is at most
  // c·(1/u − 1); the stall does not depend on H. At u = 1 nothing may stall.
  const double u = in.target;
  const double f = static_cast<double>(in.fragments);
  if (u < 1) {
    const double h_needed = std::ceil(f * d.stall_seconds * u / ((1 - u) * in.step_seconds));
    if (h_needed < 1e15)
      plan.warnings.push_back(
          cat("a larger H: ", static_cast<std::uint64_t>(std::max(h_needed, static_cast<double>(in.h) + 1)),
              " inner steps or more"));
  } else {
    plan.warnings.push_back("no H is enough for a target of 100%: only overlap hides an exchange completely");
  }
  const double allowed = hidden + d.compute_seconds * (1 / u - 1) - rtt_s;
  if (allowed <= 0)
    plan.warnings.push_back(cat("no compression is enough: ", kRoundTrips, " x RTT alone (", seconds_text(rtt_s),
                                ") is more than a round can hide at this H"));
  else
    plan.warnings.push_back(cat("more compression: a ratio of ",
                                std::ceil(in.compression * b.transfer_seconds / allowed * 10) / 10, " or more (now ",
                                in.compression, ")"));
  // Overlap: the fewest steps τ the exchange can run behind (Streaming
  // DiLoCo's overlap, below H, and at most H/F with fragments).
  const std::uint64_t most_overlap = in.fragments > 1 ? in.h / in.fragments : in.h - 1;
  const double tau = std::ceil((d.exchange_seconds - d.compute_seconds * (1 / u - 1)) / in.step_seconds - 1e-9);
  if (tau <= static_cast<double>(most_overlap))
    plan.warnings.push_back(cat("overlap: ", static_cast<std::uint64_t>(std::max(tau, 1.0)),
                                " steps (streaming.overlap; the merged update is that many steps late)"));
  // Fragments at the overlap given: each round's exchange carries 1/F of the
  // model behind the same τ steps (F at most H/τ; a fragment holds whole
  // tensors, so the model needs at least F of them).
  if (in.overlap > 0) {
    const std::uint64_t most = std::min<std::uint64_t>(in.h / in.overlap, kMostFragments);
    bool found = false;
    for (std::uint64_t n = in.fragments + 1; n <= most && !found; ++n) {
      PlanInput s = in;
      s.fragments = static_cast<std::uint32_t>(n);
      if (diloco_figures(s).utilization >= in.target) {
        plan.warnings.push_back(cat("more fragments: ", n, " (streaming.fragments, overlap ", in.overlap,
                                    " as now; the model needs at least ", n, " tensors)"));
        found = true;
      }
    }
    if (!found && most > in.fragments)
      plan.warnings.push_back(
          cat("no number of fragments up to ", most, " reaches the target with overlap ", in.overlap));
  }
  return plan;
}

}  // namespace geoloco::planner
