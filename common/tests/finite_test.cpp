// The first non-finite value, found a block at a time: every position (in
// a block, in the tail), NaN and both infinities; finite extremes (the
// largest float, denormals, -0) are finite.
#include <catch2/catch.hpp>
#include <limits>
#include <vector>

#include "common/finite.h"

using namespace geoloco;

TEST_CASE("the first NaN or infinity is found wherever it lies; finite extremes pass") {
  using L = std::numeric_limits<float>;
  std::vector<float> v(300, 1.5f);
  v[7] = L::max();
  v[8] = -L::max();
  v[9] = L::denorm_min();
  v[10] = -0.0f;
  CHECK_FALSE(first_non_finite(v).has_value());
  CHECK_FALSE(first_non_finite(std::span<const float>()).has_value());
  for (const float bad : {L::quiet_NaN(), L::infinity(), -L::infinity(), -L::quiet_NaN()}) {
    for (const std::size_t at : {std::size_t{0}, std::size_t{63}, std::size_t{64}, std::size_t{200}, std::size_t{255},
                                 std::size_t{256}, std::size_t{299}}) {
      std::vector<float> w = v;
      w[at] = bad;
      if (at + 5 < w.size()) w[at + 5] = bad;  // a later one does not hide the first
      INFO("value " << bad << " at " << at);
      REQUIRE(first_non_finite(w).has_value());
      CHECK(*first_non_finite(w) == at);
      CHECK(*first_non_finite(std::span<const float>(w).first(at + 1)) == at);
      CHECK_FALSE(first_non_finite(std::span<const float>(w).first(at)).has_value());
    }
  }
}
