// The streaming schedule (streaming_schedule.h): which fragment each round
// syncs and after how many steps. Its agreement with the outer loop's
// fragments_due() is checked in daemon/tests (the daemon links both).
#include <catch2/catch.hpp>

#include "inner/protocol/streaming_schedule.h"

using namespace geoloco::inner::protocol;

TEST_CASE("rounds sync the fragments in the order 1, 2, ..., F-1, 0", "[sanitize]") {
  CHECK(fragment_of_round(1, 3) == 1);
  CHECK(fragment_of_round(2, 3) == 2);
  CHECK(fragment_of_round(3, 3) == 0);
  CHECK(fragment_of_round(4, 3) == 1);
  for (std::uint64_t k = 1; k < 10; ++k) CHECK(fragment_of_round(k, 1) == 0);
}

TEST_CASE("the next round of a fragment is the first at or after a round that syncs it", "[sanitize]") {
  CHECK(next_round_of_fragment(1, 1, 3) == 1);
  CHECK(next_round_of_fragment(0, 1, 3) == 3);
  CHECK(next_round_of_fragment(2, 1, 3) == 2);
  CHECK(next_round_of_fragment(1, 2, 3) == 4);
  CHECK(next_round_of_fragment(0, 7, 3) == 9);
  CHECK(next_round_of_fragment(0, 5, 1) == 5);
  for (std::uint32_t f = 0; f < 4; ++f)
    for (std::uint64_t from = 1; from < 20; ++from) {
      const std::uint64_t r = next_round_of_fragment(f, from, 4);
      CHECK(r >= from);
      CHECK(r < from + 4);
      CHECK(fragment_of_round(r, 4) == f);
    }
}

TEST_CASE("F rounds make one period of H steps", "[sanitize]") {
  // H = 10, F = 3: fragments 1, 2, 0 sync after steps 3, 6, 10 of each period.
  CHECK(steps_through_round(0, 3, 10) == 0);
  CHECK(steps_through_round(1, 3, 10) == 3);
  CHECK(steps_through_round(2, 3, 10) == 6);
  CHECK(steps_through_round(3, 3, 10) == 10);
  CHECK(steps_through_round(4, 3, 10) == 13);
  CHECK(steps_through_round(6, 3, 10) == 20);
  // F = 1: plain DiLoCo, H steps per round.
  CHECK(steps_through_round(5, 1, 30) == 150);
}
