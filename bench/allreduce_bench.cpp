#include "bench/allreduce_bench.h"

#include <algorithm>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "bench/gloo_baseline.h"
#include "diloco/exchange.h"
#include "bench/timing.h"
#include <cmath>
#include "transport/allreduce.h"
#include "transport/loopback.h"

namespace geoloco::bench {

namespace {
using transport::loopback::Federation;
using transport::loopback::make_sites;
}  // namespace

bool have_gloo() { return GEOLOCO_HAVE_GLOO != 0; }

Result<std::vector<AllReduceBenchRow>> run_allreduce_bench(const AllReduceBenchOptions& o) {
  GEOLOCO_RETURN_IF(o.sites < 2 || o.sites > 16, Err::invalid_argument, "bench allreduce: --sites must be 2..16");
  GEOLOCO_RETURN_IF(o.size_bytes < 4096, Err::invalid_argument, "bench allreduce: --size must be at least 4096");
  GEOLOCO_RETURN_IF(o.rate_mbit < 0, Err::invalid_argument, "bench allreduce: --rate must be >= 0");
  GEOLOCO_RETURN_IF(o.repeats < 1, Err::invalid_argument, "bench allreduce: --repeats must be >= 1");
  const std::size_t n = o.size_bytes / sizeof(float);

  // Gloo first: its ranks are forked, which needs this process single-threaded.
  double gloo_seconds = 0;
#if GEOLOCO_HAVE_GLOO
  if (o.compare_gloo && o.rate_mbit == 0) {
    auto seconds = gloo_allreduce_seconds(o.sites, n, o.repeats);
    if (!seconds.ok()) return seconds.status();
    gloo_seconds = *seconds;
  }
#endif

  std::vector<std::string> names;
  for (int i = 0; i < o.sites; ++i) names.push_back("site" + std::to_string(i));
  auto federation = Federation::create(names);
  if (!federation.ok()) return federation.status();
  transport::TransportOptions options;
  options.connections_per_peer = o.connections_per_peer;
  options.io_threads = o.io_threads;
  options.chunk_elements = o.chunk_elements;
  options.rate_limit_mbit = o.rate_mbit;
  options.insecure_plaintext_for_tests = o.plaintext;
  auto made = make_sites(**federation, names, options);
  if (!made.ok()) return made.status();
  auto& sites = *made;

  std::vector<std::vector<float>> inputs(o.sites), outputs(o.sites);
  for (int s = 0; s < o.sites; ++s) {
    inputs[s].assign(n, static_cast<float>(s + 1));
    outputs[s].assign(n, 0.0f);
  }
  AllReduceBenchRow row;
  row.system = o.plaintext ? "geoloco-plain" : "geoloco";
  row.sites = o.sites;
  row.size_bytes = n * sizeof(float);
  row.rate_mbit = o.rate_mbit;
  row.io_threads = o.io_threads;
  row.cores = std::thread::hardware_concurrency();
  row.seconds = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep <= o.repeats; ++rep) {  // run 0 warms up
    const double cpu_before = process_cpu_seconds();
    std::vector<std::future<Result<transport::AllReduceStats>>> futures;
    for (int s = 0; s < o.sites; ++s) {
      transport::AllReduceRequest r;
      r.key = {static_cast<std::uint64_t>(rep + 1), 0};
      r.participants = names;
      r.weights.assign(o.sites, 1.0);
      r.input = inputs[s];
      r.output = outputs[s];
      auto* site = sites[s].get();
      futures.push_back(site->spawn([site, r]() { return transport::all_reduce(site->mesh(), r); }));
    }
    double slowest = 0;
    std::uint64_t most_sent = 0, all_sent = 0;
    Status failure;
    for (auto& f : futures) {
      auto res = f.get();
      if (!res.ok()) failure = res.status();
      else {
        slowest = std::max(slowest, res->seconds);
        most_sent = std::max(most_sent, res->bytes_sent);
        all_sent += res->bytes_sent;
      }
    }
    const double cpu = process_cpu_seconds() - cpu_before;
    if (!failure.ok()) return failure;
    if (rep > 0 && slowest < row.seconds) {
      row.seconds = slowest;
      row.bytes_sent = most_sent;
      row.cpu_seconds_per_gb = cpu / (static_cast<double>(all_sent) / 1e9);
    }
  }
  // Every site must hold the average: (1 + ... + N) / N.
  const float expected = static_cast<float>(o.sites + 1) / 2;
  for (int s = 0; s < o.sites; ++s)
    GEOLOCO_RETURN_IF(std::fabs(outputs[s][n / 2] - expected) > 1e-5f, Err::internal, "bench allreduce: site ", s,
                      " holds ", outputs[s][n / 2], ", expected ", expected);
  row.gbit_per_s = row.bytes_sent * 8.0 / row.seconds / 1e9;
  if (o.rate_mbit > 0) {
    row.bound_seconds =
        diloco::allreduce_bytes_per_site(static_cast<double>(row.size_bytes), o.sites) / (o.rate_mbit * 1e6 / 8);
    row.ratio_to_bound = row.seconds / row.bound_seconds;
  }
  std::vector<AllReduceBenchRow> rows{row};
  sites.clear();

  if (gloo_seconds > 0) {
    AllReduceBenchRow g;
    g.system = "gloo-ring-tcp";
    g.sites = o.sites;
    g.size_bytes = row.size_bytes;
    g.bytes_sent = static_cast<std::uint64_t>(
        diloco::allreduce_bytes_per_site(static_cast<double>(row.size_bytes), o.sites));  // the ring's volume
    g.seconds = gloo_seconds;
    g.gbit_per_s = g.bytes_sent * 8.0 / g.seconds / 1e9;
    rows.push_back(g);
  }
  return rows;
}

void print_allreduce_json(const std::vector<AllReduceBenchRow>& rows, std::ostream& out) {
  for (const auto& r : rows) {
    nlohmann::json j{{"system", r.system},
                     {"sites", r.sites},
                     {"size_bytes", r.size_bytes},
                     {"bytes_sent_per_site", r.bytes_sent},
                     {"seconds", r.seconds},
                     {"gbit_per_s_per_site", r.gbit_per_s},
                     {"rate_mbit", r.rate_mbit},
                     {"bound_seconds", r.bound_seconds},
                     {"ratio_to_bound", r.ratio_to_bound}};
    if (r.io_threads > 0) {
      j["io_threads"] = r.io_threads;
      j["cpu_seconds_per_gb"] = r.cpu_seconds_per_gb;
      j["cores"] = r.cores;
    }
    out << j.dump() << '\n';
  }
}

void print_allreduce_table(const std::vector<AllReduceBenchRow>& rows, std::ostream& out) {
  if (rows.empty()) return;
  const auto& g = rows.front();
  out << "all-reduce of " << g.size_bytes / double(1 << 20) << " MiB fp32 across " << g.sites
      << " sites over loopback (geoloco's sites are threads of one process"
      << (rows.size() > 1 ? ", Gloo's ranks separate processes)" : ")")
      << (g.rate_mbit > 0 ? cat(", egress capped at ", g.rate_mbit, " Mbit/s per site") : std::string()) << "\n";
  out << std::left << std::setw(16) << "system" << std::right << std::setw(16) << "sent/site MiB" << std::setw(10)
      << "seconds" << std::setw(14) << "Gbit/s/site" << std::setw(12) << "GB/s/site" << '\n';
  for (const auto& r : rows) {
    out << std::left << std::setw(16) << r.system << std::right << std::fixed << std::setprecision(1) << std::setw(16)
        << r.bytes_sent / double(1 << 20) << std::setprecision(3) << std::setw(10) << r.seconds << std::setprecision(2)
        << std::setw(14) << r.gbit_per_s << std::setw(12) << r.gbit_per_s / 8 << '\n';
  }
  out << std::fixed << std::setprecision(2);
  if (g.rate_mbit > 0) {
    out << "bound 2(N-1)/N x size / rate: " << std::setprecision(3) << g.bound_seconds
        << " s; measured / bound: " << std::setprecision(3) << g.ratio_to_bound
        << "  (target <= 1.15: " << (g.ratio_to_bound <= 1.15 ? "met" : "MISSED") << ")\n";
  } else {
    const bool tls = g.system == "geoloco";
    if (tls)
      out << "TLS payload per site: " << g.gbit_per_s / 8
          << " GB/s  (target >= 1 GB/s: " << (g.gbit_per_s / 8 >= 1.0 ? "met" : "MISSED") << ")\n";
    else out << "plain TCP payload per site: " << g.gbit_per_s / 8 << " GB/s (no TLS: what the rest costs)\n";
    // What the CPU allows: with every core busy, sites * cost per GB = cores.
    out << "CPU cost: " << std::setprecision(2) << g.cpu_seconds_per_gb << " core-seconds per GB a site sends ("
        << g.io_threads << " I/O threads per site); on " << g.cores << " cores, " << g.sites
        << " sites can send at most " << g.cores / (g.sites * g.cpu_seconds_per_gb) << " GB/s each\n";
    if (rows.size() > 1)
      out << g.system << (tls ? " (TLS)" : " (plain TCP)")
          << " / gloo ring (plain TCP) time: " << g.seconds / rows[1].seconds << " x\n";
    else if (!have_gloo()) out << "gloo comparison: not built (install libgloo-dev and reconfigure)\n";
  }
  out << std::defaultfloat;
}

}  // namespace geoloco::bench
