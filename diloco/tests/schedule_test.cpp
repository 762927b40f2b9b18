// The streaming schedule (fragments.h): which fragment each round syncs and
// after how many steps.
#include <catch2/catch.hpp>

#include "diloco/fragments.h"

using namespace geoloco::diloco;

TEST_CASE("rounds sync the fragments in the order 1, 2, ..., F-1, 0") {
  CHECK(fragment_of_round(1, 3) == 1);
  CHECK(fragment_of_round(2, 3) == 2);
  CHECK(fragment_of_round(3, 3) == 0);
  CHECK(fragment_of_round(4, 3) == 1);
  for (std::uint64_t k = 1; k < 10; ++k) CHECK(fragment_of_round(k, 1) == 0);
}

TEST_CASE("the next round of a fragment is the first at or after a round that syncs it") {
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

TEST_CASE("F rounds make one period of H steps") {
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

TEST_CASE("a phase is its round's share of the schedule, and every round has a step") {
  // H = 10, F = 3: phases of 3, 3 and 4 steps, then again.
  CHECK(phase_steps(1, 1, 3, 10) == 3);
  CHECK(phase_steps(2, 1, 3, 10) == 3);
  CHECK(phase_steps(3, 1, 3, 10) == 4);
  CHECK(phase_steps(4, 1, 3, 10) == 3);
  CHECK(phase_steps(7, 5, 3, 10) == 4);  // a job whose first round is 5
  CHECK(phase_steps(2, 5, 3, 10) == 3);  // before the first: counted as the first
  CHECK(phase_steps(9, 1, 1, 30) == 30);
  for (std::uint32_t f = 1; f <= 5; ++f)
    for (std::uint64_t h = f; h <= 24; ++h) {
      std::uint64_t sum = 0;
      for (std::uint64_t k = 1; k <= f; ++k) {
        const std::uint64_t p = phase_steps(k, 1, f, h);
        CHECK(p >= 1);
        sum += p;
      }
      CHECK(sum == h);  // F rounds make one period
    }
}
