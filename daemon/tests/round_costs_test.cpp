// A round's costs as status and metrics show them (round_costs.h).
#include "daemon/round_costs.h"

#include <catch2/catch.hpp>

using namespace geoloco::daemon;

TEST_CASE("a round's costs: the stages summed, passes per chunk, and the JSON status shows") {
  RoundCosts c;
  c.encode = 0.5;
  c.transfer = 1.0;
  c.decode_average = 0.25;
  c.digest = 0.125;
  c.outer_step = 0.0625;
  c.checkpoint = 2.0;
  c.values = 1000;
  c.averaged_values_decoded = 3000;
  c.own_values = 1000;
  c.values_encoded = 2000;
  CHECK(c.cpu_seconds() == 3.9375);
  CHECK(c.decodes_per_chunk() == 3.0);
  CHECK(c.encodes_per_chunk() == 2.0);

  const auto j = costs_json(c);
  CHECK(j["cpu_seconds"]["encode"] == 0.5);
  CHECK(j["cpu_seconds"]["checkpoint"] == 2.0);
  CHECK(j["cpu_seconds"]["total"] == 3.9375);
  CHECK(j["cpu_seconds"].size() == kCostStages.size() + 1);
  CHECK(j["decodes_per_chunk"] == 3.0);
  CHECK(j["checkpoint_seconds"].is_null());
  c.checkpoint_seconds = 4.5;
  CHECK(costs_json(c)["checkpoint_seconds"] == 4.5);
  CHECK(j["loop_busy_seconds"] == 0.0);
  c.loop_busy_seconds = 0.75;
  CHECK(costs_json(c)["loop_busy_seconds"] == 0.75);

  // An observer encodes nothing; an empty round decodes nothing.
  RoundCosts observer;
  observer.values = 10;
  observer.averaged_values_decoded = 30;
  CHECK(observer.encodes_per_chunk() == 0.0);
  CHECK(RoundCosts().decodes_per_chunk() == 0.0);
}
