#include "planner/plan.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using namespace geoloco;
using namespace geoloco::planner;

namespace {

// 1e9 parameters on 4 sites of 1 Gbit/s, 100 ms apart, 1 s a step, H = 100,
// int8 + zstd (4x): a round's payload is 1 GB, each site sends 1.5 GB.
PlanInput four_sites() {
  PlanInput in;
  in.parameters = 1e9;
  in.step_seconds = 1.0;
  in.tokens_per_step = 1e6;
  in.tokens = 1e12;
  for (int i = 1; i <= 4; ++i) in.sites.push_back({"site-" + std::to_string(i), 1e9});
  in.rtt_ms = 100;
  in.h = 100;
  in.compression = 4;
  in.target = 0.95;
  return in;
}

bool mentions(const Plan& p, const std::string& text) {
  for (const auto& w : p.warnings)
    if (w.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("plain DiLoCo: the round is compute plus an exchange of 3 RTT and the busiest link's bytes") {
  auto p = make_plan(four_sites());
  REQUIRE(p.ok());
  const Figures& d = p->diloco;
  CHECK(d.bytes_per_site == Approx(1.5e9));         // 2 (k-1)/k of 1 GB
  CHECK(d.bytes_per_pair == Approx(5e8));           // 2/k of 1 GB
  CHECK(d.exchange_seconds == Approx(0.3 + 12.0));  // 1.5e9 B x 8 / 1e9 bit/s
  CHECK(d.compute_seconds == Approx(100.0));
  CHECK(d.stall_seconds == Approx(12.3));
  CHECK(d.round_seconds == Approx(112.3));
  CHECK(d.utilization == Approx(100.0 / 112.3));
  CHECK(d.bytes_per_token == Approx(1.5e9 / 4e8));  // 4 sites x 100 steps x 1M tokens a round
  REQUIRE(d.train_seconds);
  CHECK(*d.train_seconds == Approx(2500 * 112.3));  // 1e12 tokens / 4e8 a round
  CHECK(p->bottleneck.link == "site-1's link");
  CHECK(p->rtt_ms == 100);

  // Data parallelism: 4 GB of fp32 gradients all-reduced after every step,
  // 2 RTT with no coordinator.
  const Figures& dp = p->data_parallel;
  CHECK(dp.bytes_per_site == Approx(6e9));
  CHECK(dp.round_seconds == Approx(1.0 + 0.2 + 48.0));
  CHECK(dp.utilization == Approx(1.0 / 49.2));
  REQUIRE(dp.train_seconds);
  CHECK(*dp.train_seconds == Approx(250000 * 49.2));  // 1e12 / 4e6 tokens a step
}

TEST_CASE("below the target the plan names the link and the H, compression and overlap that keep up") {
  auto p = make_plan(four_sites());
  REQUIRE(p.ok());
  REQUIRE(p->warnings.size() == 4);
  CHECK(mentions(*p,
                 "DiLoCo computes 89% of the time, below the target 95%: site-1's link (1 Gbit/s) needs 12 s "
                 "a round for 1.5 GB, plus 3 x RTT = 300 ms, and none of it hides"));
  CHECK(mentions(*p, "a larger H: 234 inner steps or more"));       // 12.3 s stall hidden at 95%: H >= 233.7
  CHECK(mentions(*p, "more compression: a ratio of 9.7 or more"));  // 12 s x 4 / (100 (1/0.95 - 1) - 0.3) s
  CHECK(mentions(*p, "overlap: 8 steps"));                          // 12.3 s - 5.26 s allowed = 7.04 steps

  // Each remedy does what it says, and one step short of it does not.
  PlanInput in = four_sites();
  in.h = 234;
  CHECK(diloco_figures(in).utilization >= 0.95);
  in.h = 233;
  CHECK(diloco_figures(in).utilization < 0.95);
  in = four_sites();
  in.compression = 9.7;
  CHECK(diloco_figures(in).utilization >= 0.95);
  in.compression = 9.6;
  CHECK(diloco_figures(in).utilization < 0.95);
  in = four_sites();
  in.overlap = 8;
  CHECK(diloco_figures(in).utilization >= 0.95);
  in.overlap = 7;
  CHECK(diloco_figures(in).utilization < 0.95);

  // Enough H: no warning.
  in = four_sites();
  in.h = 1000;
  auto quiet = make_plan(in);
  REQUIRE(quiet.ok());
  CHECK(quiet->warnings.empty());
}

TEST_CASE("with an overlap given, the fewest fragments that keep up; H counts F rounds") {
  PlanInput in = four_sites();
  in.overlap = 2;  // 2 s of a 12.3 s exchange hidden
  auto p = make_plan(in);
  REQUIRE(p.ok());
  CHECK(mentions(*p, "a larger H: 196 inner steps or more"));  // 10.3 s stall: H >= 195.7
  CHECK(mentions(*p, "overlap: 8 steps"));
  CHECK(mentions(*p, "more fragments: 4 (streaming.fragments, overlap 2 as now"));
  in.fragments = 3;  // a third of the model behind 2 steps: 4.3 s exchange, 2.3 s stall, 33.3 s compute
  CHECK(diloco_figures(in).utilization == Approx(33.333333 / 35.633333));
  CHECK(diloco_figures(in).utilization < 0.95);
  in.fragments = 4;
  CHECK(diloco_figures(in).utilization >= 0.95);
  CHECK(diloco_figures(in).bytes_per_site == Approx(1.5e9 / 4));

  // The H remedy counts rounds of H/F steps: on 500 Mbit/s links, F = 4 and
  // τ = 2 stall 4.3 s a round (6.3 s exchange), so 95% needs H/4 s >= 81.7 s.
  in = four_sites();
  for (auto& site : in.sites) site.bandwidth = 5e8;
  in.fragments = 4, in.overlap = 2;
  p = make_plan(in);
  REQUIRE(p.ok());
  CHECK(p->diloco.stall_seconds == Approx(4.3));
  CHECK(mentions(*p, "a larger H: 327 inner steps or more"));
  in.h = 327;
  CHECK(diloco_figures(in).utilization >= 0.95);
  in.h = 326;
  CHECK(diloco_figures(in).utilization < 0.95);
}

TEST_CASE("a target of 100%: only overlap can reach it") {
  PlanInput in = four_sites();
  in.target = 1.0;
  auto p = make_plan(in);
  REQUIRE(p.ok());
  CHECK(mentions(*p, "no H is enough for a target of 100%"));
  CHECK(mentions(*p, "no compression is enough: 3 x RTT alone (300 ms)"));
  CHECK(mentions(*p, "overlap: 13 steps"));
  in.overlap = 13;
  CHECK(diloco_figures(in).utilization == 1.0);
}

TEST_CASE("overlap hides the exchange behind the next round's steps") {
  PlanInput in = four_sites();
  in.overlap = 10;  // 10 s of the 12.3 s exchange hidden
  const Figures d = diloco_figures(in);
  CHECK(d.stall_seconds == Approx(2.3));
  CHECK(d.round_seconds == Approx(102.3));
  in.overlap = 13;
  CHECK(diloco_figures(in).stall_seconds == 0);
  CHECK(diloco_figures(in).utilization == 1.0);
}

TEST_CASE("a slow path or a slow site's link sets the exchange, and the slowest RTT counts") {
  PlanInput in = four_sites();
  in.pairs.push_back({"site-4", "site-2", 300, 100e6});  // 0.5 GB at 100 Mbit/s: 40 s
  auto p = make_plan(in);
  REQUIRE(p.ok());
  CHECK(p->bottleneck.link == "the path site-4 - site-2");
  CHECK(p->rtt_ms == 300);
  CHECK(p->diloco.exchange_seconds == Approx(0.9 + 40.0));
  CHECK(mentions(*p, "the path site-4 - site-2 (100 Mbit/s) needs 40 s a round for 500 MB, plus 3 x RTT = 900 ms"));

  in = four_sites();
  in.sites[2].bandwidth = 100e6;  // site-3: 1.5 GB at 100 Mbit/s = 120 s
  p = make_plan(in);
  REQUIRE(p.ok());
  CHECK(p->bottleneck.link == "site-3's link");
  CHECK(p->diloco.exchange_seconds == Approx(0.3 + 120.0));

  // Every pair listed with a shorter RTT: the default no longer counts.
  in = four_sites();
  for (int a = 1; a <= 4; ++a)
    for (int b = a + 1; b <= 4; ++b) in.pairs.push_back({"site-" + std::to_string(a), "site-" + std::to_string(b), 20});
  p = make_plan(in);
  REQUIRE(p.ok());
  CHECK(p->rtt_ms == 20);
}

TEST_CASE("when 3 RTT alone exceeds what a round hides, no compression is offered") {
  PlanInput in = four_sites();
  in.parameters = 1000;
  in.step_seconds = 0.01;
  in.h = 10;  // 0.1 s of compute a round; 0.3 s of RTT
  auto p = make_plan(in);
  REQUIRE(p.ok());
  CHECK(mentions(*p, "no compression is enough: 3 x RTT alone (300 ms)"));
  CHECK_FALSE(mentions(*p, "more compression"));
}

TEST_CASE("bad plans are refused with what to fix") {
  auto refused = [](PlanInput in, const std::string& text) {
    auto p = make_plan(in);
    REQUIRE_FALSE(p.ok());
    INFO(p.status().message());
    CHECK(p.status().message().find(text) != std::string::npos);
  };
  PlanInput in = four_sites();
  in.sites.resize(1);
  refused(in, "DiLoCo needs 2 to 10000 sites, got 1");
  in = four_sites();
  in.overlap = 100;
  refused(in, "the overlap (100 steps) must be smaller than H (100)");
  in = four_sites();
  in.fragments = 4, in.overlap = 26;
  refused(in, "must be at most H/F = 25");
  in = four_sites();
  in.pairs.push_back({"site-1", "site-9", 10});
  refused(in, "the path site-1 - site-9 does not join two of the sites");
  in = four_sites();
  in.pairs = {{"site-1", "site-2", 10}, {"site-2", "site-1", 20}};
  refused(in, "is given twice");
  in = four_sites();
  in.compression = 0.5;
  refused(in, "compression ratio");
  in = four_sites();
  in.step_seconds = 0;
  refused(in, "step time must be > 0");
  in = four_sites();
  in.sites[1].name = "site-1";
  refused(in, "'site-1' is empty or given twice");
  in = four_sites();
  in.rtt_ms = std::nan("");
  refused(in, "the RTT must be a finite number of ms");
  in = four_sites();
  in.pairs.push_back({"site-1", "site-2", std::numeric_limits<double>::infinity()});
  refused(in, "the path site-1 - site-2 needs a finite RTT and bandwidth");
  in = four_sites();
  in.tokens_per_step = 0;
  refused(in, "a time to train needs the tokens a site trains on per step");
}

TEST_CASE("geolocod's host RAM, disk and CPU at a site follow the model and the measured per-GB cost") {
  auto p = make_plan(four_sites());  // 1e9 parameters, 4x: a round syncs 4 GB of fp32, 1 GB on the wire
  REQUIRE(p.ok());
  const SiteResources& r = p->site;
  CHECK(r.ram_bytes_between_rounds == Approx(12e9));  // anchor, momentum, residual
  CHECK(r.ram_bytes_in_round == Approx(13e9));        // + the averaged Δ as its wire bytes
  CHECK(r.checkpoint_bytes == Approx(12e9));
  CHECK(r.round_log_bytes_per_round == Approx(1e9));
  CHECK(r.cpu_core_seconds_per_round == Approx(4 * kDaemonCoreSecondsPerGbCompressed));
  // A site sends 1.5 GB through its 1 Gbit/s link: 12 s of transfer.
  CHECK(p->bottleneck.transfer_seconds == Approx(12.0));
  CHECK(r.cores_to_keep_up == Approx(r.cpu_core_seconds_per_round / 12.0));
  CHECK(kDaemonCoreSecondsPerGbCompressed > 0);

  // Raw fp32: no residual; fragments sync a part of the model each round.
  auto raw = four_sites();
  raw.compression = 1;
  raw.fragments = 4;
  auto q = make_plan(raw);
  REQUIRE(q.ok());
  CHECK(q->site.ram_bytes_between_rounds == Approx(8e9));
  CHECK(q->site.round_log_bytes_per_round == Approx(1e9));  // 4 GB / 4 fragments, uncompressed
  CHECK(q->site.cpu_core_seconds_per_round == Approx(kDaemonCoreSecondsPerGbRaw));
  CHECK(kDaemonCoreSecondsPerGbRaw > 0);
}
