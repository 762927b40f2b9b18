// `geoloco plan`: what a DiLoCo job will cost on given sites and links, next
// to data parallelism on the same links, before anything runs
// (planner/plan.h has the model).
#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "common/units.h"
#include "diloco/fragments.h"
#include "planner/plan.h"

namespace geoloco::cli {

namespace {

struct PlanArgs {
  std::string parameters;
  double step_seconds = 0;
  std::string tokens_per_step = "0";
  int sites = 0;
  std::string bandwidth = "1G";
  std::vector<std::string> site_bandwidths;  // NAME=RATE
  double rtt_ms = 100;
  std::vector<std::string> pairs;  // A:B=RTT_MS[/RATE]
  std::uint64_t h = 500;
  std::uint32_t fragments = 1;
  std::optional<std::uint64_t> overlap;
  bool delayed = false;
  double compression = 4.0;
  std::string tokens = "0";
  double target = 0.95;
  bool json = false;
};

Result<double> count(const std::string& flag, const std::string& text) {
  auto v = parse_count(text);
  if (!v.ok()) return GEOLOCO_ERROR(Err::invalid_argument, flag, ": ", v.status().message());
  return *v;
}

Result<planner::PlanInput> read_input(const PlanArgs& a) {
  planner::PlanInput in;
  auto params = count("--params", a.parameters);
  if (!params.ok()) return params.status();
  in.parameters = *params;
  in.step_seconds = a.step_seconds;
  auto tps = count("--tokens-per-step", a.tokens_per_step);
  if (!tps.ok()) return tps.status();
  in.tokens_per_step = *tps;
  auto tokens = count("--tokens", a.tokens);
  if (!tokens.ok()) return tokens.status();
  in.tokens = *tokens;
  auto rate = parse_rate(a.bandwidth);
  if (!rate.ok()) return GEOLOCO_ERROR(Err::invalid_argument, "--bandwidth: ", rate.status().message());
  for (int i = 1; i <= a.sites; ++i) in.sites.push_back({cat("site-", i), *rate});
  for (const auto& text : a.site_bandwidths) {
    const auto eq = text.find('=');
    auto it = eq == std::string::npos ? in.sites.end()
                                      : std::find_if(in.sites.begin(), in.sites.end(),
                                                     [&](const auto& s) { return s.name == text.substr(0, eq); });
    if (it == in.sites.end())
      return GEOLOCO_ERROR(Err::invalid_argument, "--site-bandwidth ", text,
                           ": expected NAME=RATE with NAME one of site-1 ... site-", a.sites);
    auto r = parse_rate(text.substr(eq + 1));
    if (!r.ok()) return GEOLOCO_ERROR(Err::invalid_argument, "--site-bandwidth ", text, ": ", r.status().message());
    it->bandwidth = *r;
  }
  in.rtt_ms = a.rtt_ms;
  for (const auto& text : a.pairs) {
    const auto colon = text.find(':');
    const auto eq = text.find('=');
    const auto slash = text.find('/');
    if (colon == std::string::npos || eq == std::string::npos || eq < colon)
      return GEOLOCO_ERROR(Err::invalid_argument, "--pair ", text, ": expected A:B=RTT_MS or A:B=RTT_MS/RATE");
    planner::PairPlan p{text.substr(0, colon), text.substr(colon + 1, eq - colon - 1)};
    const std::string rtt = text.substr(eq + 1, slash == std::string::npos ? std::string::npos : slash - eq - 1);
    char* end = nullptr;
    p.rtt_ms = std::strtod(rtt.c_str(), &end);
    if (rtt.empty() || *end != '\0')
      return GEOLOCO_ERROR(Err::invalid_argument, "--pair ", text, ": '", rtt, "' is not an RTT in ms");
    if (slash != std::string::npos) {
      auto r = parse_rate(text.substr(slash + 1));
      if (!r.ok()) return GEOLOCO_ERROR(Err::invalid_argument, "--pair ", text, ": ", r.status().message());
      p.bandwidth = *r;
    }
    in.pairs.push_back(std::move(p));
  }
  in.h = a.h;
  in.fragments = a.fragments;
  // The delayed outer step lets an exchange overlap the whole next phase,
  // as the job file's streaming.merge: delayed does unless overlap is given.
  in.overlap = a.overlap ? *a.overlap : a.delayed ? diloco::delayed_overlap(a.h, a.fragments) : 0;
  in.compression = a.compression;
  in.target = a.target;
  return in;
}

std::string duration(double s) {
  std::ostringstream o;
  o << std::fixed;
  if (s < 120) o << std::setprecision(s < 10 ? 2 : 1) << s << " s";
  else if (s < 7200) o << std::setprecision(1) << s / 60 << " min";
  else if (s < 3 * 86400) o << std::setprecision(1) << s / 3600 << " h";
  else o << std::setprecision(1) << s / 86400 << " days";
  return o.str();
}

std::string bytes(double b) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2);
  if (b >= 1e12) o << b / 1e12 << " TB";
  else if (b >= 1e9) o << b / 1e9 << " GB";
  else if (b >= 1e6) o << b / 1e6 << " MB";
  else o << b / 1e3 << " kB";
  return o.str();
}

nlohmann::json figures_json(const planner::Figures& f) {
  nlohmann::json j = {{"round_seconds", f.round_seconds},       {"compute_seconds", f.compute_seconds},
                      {"exchange_seconds", f.exchange_seconds}, {"stall_seconds", f.stall_seconds},
                      {"utilization", f.utilization},           {"bytes_per_site", f.bytes_per_site},
                      {"bytes_per_pair", f.bytes_per_pair},     {"bytes_per_token", f.bytes_per_token}};
  j["train_seconds"] = f.train_seconds ? nlohmann::json(*f.train_seconds) : nlohmann::json(nullptr);
  return j;
}

void print_text(const PlanArgs& a, const planner::PlanInput& in, const planner::Plan& p) {
  const auto& d = p.diloco;
  const auto& dp = p.data_parallel;
  std::cout << "geoloco plan: " << a.parameters << " parameters, " << in.sites.size() << " sites, " << in.step_seconds
            << " s per step, H = " << in.h << ", fragments " << in.fragments << ", overlap " << in.overlap
            << (a.delayed ? " (delayed outer step)" : "") << ", compression " << in.compression << "x, slowest RTT "
            << p.rtt_ms << " ms\n\n";
  auto row = [](const std::string& what, const std::string& x, const std::string& y) {
    std::cout << "  " << std::left << std::setw(36) << what << std::setw(22) << x << y << '\n';
  };
  row("", "DiLoCo (a round)", "data parallel (a step)");
  row("wall-clock", duration(d.round_seconds), duration(dp.round_seconds));
  row("compute", duration(d.compute_seconds), duration(dp.compute_seconds));
  row("exchange", duration(d.exchange_seconds), duration(dp.exchange_seconds));
  row("compute waits for the network", duration(d.stall_seconds), duration(dp.stall_seconds));
  // Rounded down, as the warning says it: 94.96% is not 95%.
  std::ostringstream du, pu;
  du << std::fixed << std::setprecision(1) << std::floor(d.utilization * 1000) / 10 << "%";
  pu << std::fixed << std::setprecision(1) << std::floor(dp.utilization * 1000) / 10 << "%";
  row("compute utilization", du.str(), pu.str());
  row("bytes each site sends", bytes(d.bytes_per_site), bytes(dp.bytes_per_site));
  row("bytes on each path, each way", bytes(d.bytes_per_pair), bytes(dp.bytes_per_pair));
  if (d.bytes_per_token > 0) {
    auto per_token = [](double v) {
      std::ostringstream o;
      if (v >= 100) o << std::fixed << std::setprecision(0);
      else o << std::setprecision(3);
      o << v;
      return o.str();
    };
    const std::string x = per_token(d.bytes_per_token), y = per_token(dp.bytes_per_token);
    row("bytes a site sends per token", x, y);
  }
  if (d.train_seconds && dp.train_seconds)
    row(a.tokens.size() <= 14 ? "time to train " + a.tokens + " tokens" : "time to train the tokens",
        duration(*d.train_seconds), duration(*dp.train_seconds));
  const double bw = p.bottleneck.bandwidth;
  std::cout << "\n  DiLoCo's exchange is set by " << p.bottleneck.link << " (" << (bw >= 1e9 ? bw / 1e9 : bw / 1e6)
            << (bw >= 1e9 ? " Gbit/s" : " Mbit/s") << "); data parallelism sends " << std::fixed << std::setprecision(0)
            << dp.bytes_per_site * in.h / in.fragments / d.bytes_per_site << "x the bytes for the same steps\n"
            << std::defaultfloat << std::setprecision(6);
  const auto& r = p.site;
  std::cout << "\n  geolocod at each site (its CPU from " << planner::kDaemonCostSource << "):\n"
            << "    host RAM " << bytes(r.ram_bytes_between_rounds) << " between rounds, "
            << bytes(r.ram_bytes_in_round) << " during a round\n"
            << "    disk " << bytes(r.checkpoint_bytes) << " per checkpoint, " << bytes(r.round_log_bytes_per_round)
            << " per round of the round log\n"
            << "    CPU " << std::fixed << std::setprecision(1) << r.cpu_core_seconds_per_round
            << " core-s per round: " << std::setprecision(r.cores_to_keep_up < 10 ? 2 : 0) << r.cores_to_keep_up
            << " cores to keep up with " << p.bottleneck.link << "\n"
            << std::defaultfloat << std::setprecision(6);
  if (p.warnings.empty()) {
    std::cout << "  every link keeps up: compute utilization at or above the target " << in.target * 100 << "%\n";
  } else {
    std::cout << "\nwarning: " << p.warnings.front() << ". What would change that:\n";
    for (std::size_t i = 1; i < p.warnings.size(); ++i) std::cout << "  - " << p.warnings[i] << '\n';
  }
}

}  // namespace

void add_plan_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<PlanArgs>();
  auto* plan = app.add_subcommand(
      "plan",
      "Predict a DiLoCo job's round time, compute utilization, bytes per link and time to train, next to "
      "data parallelism's, from the model size, step time, sites and links; warn when a link cannot keep up");
  plan->add_option("--params", a->parameters, "the model's parameters, with k, M, G or T (7G, 1.3e9)")->required();
  plan->add_option("--step-seconds", a->step_seconds, "the slowest site's seconds per inner step")->required();
  plan->add_option("--sites", a->sites, "sites, named site-1 ... site-N")->required()->check(CLI::Range(2, 10000));
  plan->add_option("--bandwidth", a->bandwidth, "each site's WAN link in bit/s (100M, 1G, 10G)")->capture_default_str();
  plan->add_option("--site-bandwidth", a->site_bandwidths, "one site's own link: NAME=RATE (site-3=100M); repeatable");
  plan->add_option("--rtt", a->rtt_ms, "round-trip time of every path --pair does not give, ms")->capture_default_str();
  plan->add_option("--pair", a->pairs,
                   "one path's RTT in ms and, optionally, a bandwidth below the sites' links: A:B=RTT or "
                   "A:B=RTT/RATE (site-1:site-4=180/200M); repeatable");
  plan->add_option("--h", a->h,
                   "inner steps between two syncs of the same parameters (inner.steps; a round is "
                   "H/F steps with fragments)")
      ->capture_default_str();
  plan->add_option("--fragments", a->fragments, "Streaming DiLoCo's fragments (streaming.fragments)")
      ->capture_default_str();
  plan->add_option("--overlap", a->overlap,
                   "inner steps an exchange overlaps (streaming.overlap; default 0, with --delayed the whole next "
                   "phase)");
  plan->add_flag("--delayed", a->delayed,
                 "the delayed outer step (streaming.merge: delayed): the next phase starts at once, so the exchange "
                 "may overlap it all: H - 1 steps, H/F with fragments, unless --overlap says otherwise");
  plan->add_option("--compression", a->compression,
                   "fp32 bytes over wire bytes of the pipeline (int8 + zstd about 4; `geoloco bench codecs` "
                   "measures yours)")
      ->capture_default_str();
  plan->add_option("--tokens-per-step", a->tokens_per_step,
                   "tokens one site trains on per inner step, e.g. 1M (for bytes per token)");
  plan->add_option("--tokens", a->tokens, "tokens to train, e.g. 1T (for the time to train; needs --tokens-per-step)");
  plan->add_option("--target", a->target, "compute utilization below which to warn")->capture_default_str();
  plan->add_flag("--json", a->json, "one JSON object");
  plan->callback([&action, a] {
    action = [a] {
      auto in = read_input(*a);
      auto p = in.ok() ? planner::make_plan(*in) : Result<planner::Plan>(in.status());
      if (!p.ok()) {
        std::cerr << "geoloco plan: " << p.status().message() << '\n';
        return 2;
      }
      if (!a->json) {
        print_text(*a, *in, *p);
        return 0;
      }
      nlohmann::json j = {{"diloco", figures_json(p->diloco)},
                          {"data_parallel", figures_json(p->data_parallel)},
                          {"bottleneck",
                           {{"link", p->bottleneck.link},
                            {"bandwidth", p->bottleneck.bandwidth},
                            {"transfer_seconds", p->bottleneck.transfer_seconds}}},
                          {"rtt_ms", p->rtt_ms},
                          {"site",
                           {{"ram_bytes_between_rounds", p->site.ram_bytes_between_rounds},
                            {"ram_bytes_in_round", p->site.ram_bytes_in_round},
                            {"checkpoint_bytes", p->site.checkpoint_bytes},
                            {"round_log_bytes_per_round", p->site.round_log_bytes_per_round},
                            {"cpu_core_seconds_per_round", p->site.cpu_core_seconds_per_round},
                            {"cores_to_keep_up", p->site.cores_to_keep_up},
                            {"cpu_source", planner::kDaemonCostSource}}},
                          {"warnings", p->warnings}};
      std::cout << j.dump() << '\n';
      return 0;
    };
  });
}

}  // namespace geoloco::cli
