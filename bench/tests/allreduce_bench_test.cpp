// The all-reduce benchmark reports what it measured: each site sent the
// two-phase volume, the bound follows the formula, JSON carries the keys.
// (No timing is asserted: the machine is shared.)
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/allreduce_bench.h"

using namespace geoloco;

TEST_CASE("bench allreduce measures the two-phase volume and the capped bound") {
  bench::AllReduceBenchOptions o;
  o.sites = 3;
  o.size_bytes = 3u << 20;
  o.rate_mbit = 400;
  o.repeats = 1;
  o.connections_per_peer = 2;
  auto rows = bench::run_allreduce_bench(o);
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 1);  // no baseline under a cap
  const auto& r = rows->front();
  const double volume = 2.0 * 2 / 3 * (3u << 20);
  CHECK(r.bytes_sent >= volume);
  CHECK(r.bytes_sent <= volume * 1.01 + 64 * 1024);  // frame and payload headers only
  CHECK(r.bound_seconds == Approx(volume / (400e6 / 8)));
  CHECK(r.ratio_to_bound == Approx(r.seconds / r.bound_seconds));
  CHECK(r.ratio_to_bound > 0.5);  // a cap cannot be beaten by much (burst allowance only)

  std::ostringstream out;
  bench::print_allreduce_json(*rows, out);
  auto j = nlohmann::json::parse(out.str());
  for (const char* key : {"system", "sites", "size_bytes", "bytes_sent_per_site", "seconds", "gbit_per_s_per_site",
                          "rate_mbit", "bound_seconds", "ratio_to_bound"})
    CHECK(j.contains(key));
}

TEST_CASE("bench allreduce refuses options it cannot run") {
  bench::AllReduceBenchOptions o;
  o.sites = 1;
  CHECK(bench::run_allreduce_bench(o).status().message() == "bench allreduce: --sites must be 2..16");
  o.sites = 2;
  o.rate_mbit = -1;
  CHECK_FALSE(bench::run_allreduce_bench(o).ok());
}

TEST_CASE("bench allreduce times Gloo's ring with its ranks as processes") {
  if (!bench::have_gloo()) {
    WARN("SKIPPED: built without Gloo (libgloo-dev)");
    return;
  }
  bench::AllReduceBenchOptions o;
  o.sites = 3;
  o.size_bytes = 1u << 20;
  o.repeats = 1;
  auto rows = bench::run_allreduce_bench(o);  // each Gloo rank checks its sum and reports an error if wrong
  if (!rows.ok()) FAIL(rows.status().message());
  REQUIRE(rows->size() == 2);
  const auto& g = (*rows)[1];
  CHECK(g.system == "gloo-ring-tcp");
  CHECK(g.bytes_sent == static_cast<std::uint64_t>(2.0 * 2 / 3 * (1u << 20)));
  CHECK(g.seconds > 0);
  CHECK(std::isfinite(g.seconds));
  std::ostringstream out;
  bench::print_allreduce_table(*rows, out);
  CHECK(out.str().find("Gloo's ranks separate processes") != std::string::npos);
  CHECK(out.str().find("/ gloo ring (plain TCP) time: ") != std::string::npos);
}
