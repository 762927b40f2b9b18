#include "diloco/straggler.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "diloco/phase.h"

using namespace geoloco;
using namespace geoloco::diloco;

TEST_CASE("straggler: carry weights a late contribution by decay^rounds_late, drop discards it") {
  StragglerOptions carry;
  carry.decay = 0.5;
  const Contribution on_time{0, 7, 100, 3200};
  const Contribution late{1, 4, 250, 8000};  // anchor 4, round 7: 3 rounds late

  auto a = decide_contribution(on_time, 7, Weighting::tokens, carry);
  REQUIRE(a.ok());
  CHECK(a->included);
  CHECK(a->weight == 3200.0);
  CHECK(a->rounds_late == 0);

  auto b = decide_contribution(late, 7, Weighting::tokens, carry);
  REQUIRE(b.ok());
  CHECK(b->included);
  CHECK(b->rounds_late == 3);
  CHECK(b->weight == 8000.0 * 0.125);
  CHECK_THAT(b->reason, Catch::Contains("3 round(s) late, policy carry"));

  auto u = decide_contribution(late, 7, Weighting::uniform, carry);
  CHECK(u->weight == 0.125);

  StragglerOptions drop = carry;
  drop.policy = StragglerPolicy::drop;
  auto c = decide_contribution(late, 7, Weighting::tokens, drop);
  REQUIRE(c.ok());
  CHECK_FALSE(c->included);
  CHECK(c->weight == 0.0);
  // Nothing is discarded silently: the reason names the work.
  CHECK_THAT(c->reason, Catch::Contains("discarding 250 inner steps, 8000 tokens"));
  CHECK(decide_contribution(on_time, 7, Weighting::tokens, drop)->weight == 3200.0);

  // Too late even for carry.
  carry.max_rounds_late = 2;
  auto d = decide_contribution(late, 7, Weighting::tokens, carry);
  CHECK_FALSE(d->included);
  CHECK_THAT(d->reason, Catch::Contains("over max_rounds_late 2"));
}

TEST_CASE("straggler: carry loses no site's work over many rounds; drop accounts for what it discards") {
  // Three sites, 10 rounds of H = 20 steps. Site 2 is slow: it is left out of
  // the PLANs of rounds 3, 4 and 8, keeps training from its old anchor, and
  // reports its accumulated work when it is next included.
  const std::uint64_t h = 20, rounds = 10, tokens_per_step = 32;
  auto left_out = [](std::uint32_t site, std::uint64_t round) {
    return site == 2 && (round == 3 || round == 4 || round == 8);
  };
  for (auto policy : {StragglerPolicy::carry, StragglerPolicy::drop}) {
    StragglerOptions o;
    o.policy = policy;
    o.decay = 0.5;
    std::map<std::uint32_t, std::uint64_t> anchor_of{{0, 1}, {1, 1}, {2, 1}};  // round 1 starts from anchor 1
    std::map<std::uint32_t, std::uint64_t> steps_pending, steps_run, steps_counted, steps_dropped;
    std::map<std::uint32_t, double> weight_sum;
    for (std::uint64_t r = 1; r <= rounds; ++r) {
      std::vector<Contribution> ready;
      for (std::uint32_t s = 0; s < 3; ++s) {
        steps_pending[s] += h;
        steps_run[s] += h;
        if (left_out(s, r)) continue;
        ready.push_back({s, anchor_of[s], steps_pending[s], steps_pending[s] * tokens_per_step});
      }
      auto decisions = decide_round(ready, r, Weighting::tokens, o);
      REQUIRE(decisions.ok());
      for (const auto& d : *decisions) {
        if (d.included) {
          steps_counted[d.site] += steps_pending[d.site];
          weight_sum[d.site] += d.weight;
        } else {
          steps_dropped[d.site] += steps_pending[d.site];
        }
        // Included or dropped, the site restarts from the anchor of round
        // r + 1; a site left out keeps training from its old anchor.
        steps_pending[d.site] = 0;
        anchor_of[d.site] = r + 1;
      }
    }
    for (std::uint32_t s = 0; s < 3; ++s) {
      INFO("site " << s);
      // Every inner step run is either counted in some round or reported dropped.
      CHECK(steps_counted[s] + steps_dropped[s] + steps_pending[s] == steps_run[s]);
    }
    if (policy == StragglerPolicy::carry) {
      CHECK(steps_counted[2] == steps_run[2]);  // carry loses nothing
      CHECK(steps_dropped[2] == 0);
      // Rounds 1, 2, 6, 7, 9, 10 on time (20 steps each), round 5 carries 60
      // steps 2 rounds late (× 0.25), round 9 carries 40 steps 1 round late (× 0.5).
      CHECK(weight_sum[2] == Approx((5 * 20 + 60 * 0.25 + 40 * 0.5) * tokens_per_step));
    } else {
      CHECK(steps_dropped[2] == 60 + 40);
      CHECK(steps_counted[2] == steps_run[2] - 100);
    }
    CHECK(steps_counted[0] == rounds * h);
  }
}

TEST_CASE("straggler: a round needs a weight, one contribution per site, none from the future") {
  StragglerOptions o;
  o.policy = StragglerPolicy::drop;
  const std::vector<Contribution> all_late{{0, 1, 5, 50}, {1, 2, 5, 50}};
  CHECK_THAT(decide_round(all_late, 3, Weighting::tokens, o).status().message(),
             Catch::Contains("no contribution is included"));
  const std::vector<Contribution> twice{{0, 3, 5, 50}, {0, 3, 5, 50}};
  CHECK_THAT(decide_round(twice, 3, Weighting::tokens, o).status().message(), Catch::Contains("contributes twice"));
  CHECK_THAT(decide_contribution({0, 4, 5, 50}, 3, Weighting::tokens, o).status().message(),
             Catch::Contains("cannot come from a future round"));
  CHECK_THAT(decide_contribution({0, 3, 5, 0}, 3, Weighting::tokens, o).status().message(),
             Catch::Contains("reports 0 tokens"));
  o.decay = 0.0;
  CHECK_THAT(o.validate().message(), Catch::Contains("straggler.decay must be in (0, 1]"));
  // Decisions come out in site order whatever the input order.
  StragglerOptions carry;
  const std::vector<Contribution> unordered{{2, 3, 5, 50}, {0, 3, 5, 70}, {1, 2, 5, 60}};
  auto d = decide_round(unordered, 3, Weighting::tokens, carry);
  REQUIRE(d.ok());
  CHECK((*d)[0].site == 0);
  CHECK((*d)[1].weight == 30.0);
  CHECK((*d)[2].weight == 50.0);
}

TEST_CASE("inner phase: fixed steps, or as many as fit in the time budget, weighted by tokens") {
  InnerPhaseOptions fixed;
  fixed.steps = 500;
  CHECK_FALSE(phase_over(fixed, 499, 1e9));  // steps, not time
  CHECK(phase_over(fixed, 500, 0.0));
  InnerPhaseOptions timed;
  timed.duration_s = 60.0;
  // A fast site (0.25 s a step) is over after 240 steps, a slow one (0.7 s) after 86.
  auto steps_at = [&](double seconds_per_step) {
    std::uint64_t steps = 0;
    while (!phase_over(timed, steps, static_cast<double>(steps) * seconds_per_step)) ++steps;
    return steps;
  };
  CHECK(steps_at(0.25) == 240);
  CHECK(steps_at(0.7) == 86);
  CHECK(steps_at(1000.0) == 1);  // at least min_steps
  timed.min_steps = 10;
  CHECK(steps_at(1000.0) == 10);
  timed.duration_s = -1;
  CHECK_THAT(timed.validate().message(), Catch::Contains("inner.duration"));
  // Token weighting gives the fast site's Δ 240/86 of the slow site's weight.
  StragglerOptions o;
  auto fast = decide_contribution({0, 1, 240, 240 * 64}, 1, Weighting::tokens, o);
  auto slow = decide_contribution({1, 1, 86, 86 * 64}, 1, Weighting::tokens, o);
  CHECK(fast->weight / slow->weight == Approx(240.0 / 86.0));
}

TEST_CASE("late work: on time counts, late is carried under carry up to max_rounds_late, else dropped") {
  StragglerOptions carry;
  carry.max_rounds_late = 3;
  CHECK(late_work(0, carry) == LateWork::on_time);
  CHECK(late_work(1, carry) == LateWork::carry);
  CHECK(late_work(3, carry) == LateWork::carry);
  CHECK(late_work(4, carry) == LateWork::drop);
  CHECK(late_work(1, carry, 4) == LateWork::drop);  // streaming: the next round syncs another fragment
  CHECK(late_work(0, carry, 4) == LateWork::on_time);
  StragglerOptions drop;
  drop.policy = StragglerPolicy::drop;
  CHECK(late_work(1, drop) == LateWork::drop);
}

TEST_CASE(
    "a round's plan: included sites in name order with their weights, tokens and weighted loss; the rest left out") {
  CHECK(reported_work(0, std::nan("")).tokens == 1);
  CHECK(reported_work(0, std::nan("")).loss == 0.0);
  CHECK(reported_work(640, 1.5).tokens == 640);
  CHECK(reported_work(640, 1.5).loss == 1.5);
  // Site indices in job order; names not in that order.
  const std::vector<std::string> names{"c", "a", "b"};
  const std::vector<ReportedWork> work{{300, 3.0}, {100, 1.0}, {200, 2.0}};
  std::vector<ContributionDecision> decisions(3);
  decisions[0] = {0, true, 3.0, 0, ""};
  decisions[1] = {1, false, 0.0, 5, ""};
  decisions[2] = {2, true, 1.0, 0, ""};
  const auto plan = order_plan(decisions, names, work);
  CHECK(plan.participants == std::vector<std::uint32_t>{2, 0});  // "b", "c"
  CHECK(plan.weights == std::vector<double>{1.0, 3.0});
  CHECK(plan.left_out == std::vector<std::uint32_t>{1});
  CHECK(plan.tokens == 500);
  CHECK(plan.loss == (1.0 * 2.0 + 3.0 * 3.0) / 4.0);
}
