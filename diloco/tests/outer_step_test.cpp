#include "diloco/outer_step.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

using namespace geoloco;
using namespace geoloco::diloco;

TEST_CASE("outer optimizer: Nesterov steps match values computed by hand") {
  // Δ = 1 every round, η = 0.7, μ = 0.9, θ_0 = 10:
  //   m1 = 1,     θ1 = 10 − 0.7·(1 + 0.9·1)     = 8.67
  //   m2 = 1.9,   θ2 = 8.67 − 0.7·(1 + 0.9·1.9)  = 6.773
  //   m3 = 2.71,  θ3 = 6.773 − 0.7·(1 + 0.9·2.71) = 4.3657
  //   m4 = 3.439, θ4 = 4.3657 − 0.7·(1 + 0.9·3.439) = 1.49913
  std::vector<float> theta{10.0f}, m{0.0f};
  const std::vector<float> delta{1.0f};
  const double expected_theta[] = {8.67, 6.773, 4.3657, 1.49913};
  const double expected_m[] = {1.0, 1.9, 2.71, 3.439};
  for (int r = 0; r < 4; ++r) {
    REQUIRE(outer_step(theta, m, delta, OuterOptimizerOptions{}).ok());
    CHECK(theta[0] == Approx(expected_theta[r]).epsilon(1e-6));
    CHECK(m[0] == Approx(expected_m[r]).epsilon(1e-6));
  }
}

TEST_CASE("outer optimizer: Nesterov and heavy-ball SGD match an independent double-precision reference") {
  const std::size_t n = 257;
  for (auto algorithm : {OuterAlgorithm::nesterov, OuterAlgorithm::sgd}) {
    OuterOptimizerOptions o;
    o.algorithm = algorithm;
    o.learning_rate = 0.5;
    o.momentum = 0.8;
    std::vector<float> theta(n), m(n, 0.0f), delta(n);
    std::vector<double> ref_theta(n), ref_m(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) theta[i] = static_cast<float>(ref_theta[i] = std::sin(0.1 * i));
    for (int r = 1; r <= 5; ++r) {
      for (std::size_t i = 0; i < n; ++i) delta[i] = static_cast<float>(std::cos(0.37 * i + r) / r);
      REQUIRE(outer_step(theta, m, delta, o).ok());
      for (std::size_t i = 0; i < n; ++i) {
        ref_m[i] = 0.8 * ref_m[i] + delta[i];
        const double update = algorithm == OuterAlgorithm::nesterov ? delta[i] + 0.8 * ref_m[i] : ref_m[i];
        ref_theta[i] -= 0.5 * update;
      }
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(theta[i] == Approx(ref_theta[i]).margin(1e-5));
        REQUIRE(m[i] == Approx(ref_m[i]).margin(1e-5));
      }
    }
  }
}

TEST_CASE("outer optimizer: SGD with eta = 1, mu = 0 replaces the anchor by theta_r - delta exactly") {
  std::vector<float> theta{1.0f, -2.5f, 3.0f}, m{7.0f, 7.0f, 7.0f};
  const std::vector<float> delta{0.25f, -0.5f, 1.0f};
  REQUIRE(outer_step(theta, m, delta, OuterOptimizerOptions::averaging()).ok());
  CHECK(theta == std::vector<float>{0.75f, -2.0f, 2.0f});
  CHECK(m == delta);  // μ = 0 forgets the old momentum
}

TEST_CASE("outer optimizer: clipping scales delta to the norm bound") {
  const std::vector<float> delta{3.0f, 4.0f};  // norm 5
  CHECK(squared_norm(delta) == 25.0);
  CHECK(clip_scale(5.0, 0.0) == 1.0f);   // off
  CHECK(clip_scale(5.0, 10.0) == 1.0f);  // under the bound
  CHECK(clip_scale(5.0, 1.0) == 0.2f);
  CHECK(clip_scale(0.0, 1.0) == 1.0f);
  OuterOptimizerOptions o = OuterOptimizerOptions::averaging();
  o.clip_norm = 1.0;
  std::vector<float> theta{0.0f, 0.0f}, m{0.0f, 0.0f};
  REQUIRE(outer_step(theta, m, delta, o, clip_scale(std::sqrt(squared_norm(delta)), o.clip_norm)).ok());
  CHECK(theta[0] == Approx(-0.6f));
  CHECK(theta[1] == Approx(-0.8f));
  CHECK(std::sqrt(theta[0] * theta[0] + theta[1] * theta[1]) == Approx(1.0));
}

TEST_CASE("outer optimizer: bad options and bad input are refused and change nothing") {
  OuterOptimizerOptions o;
  o.momentum = 1.0;
  CHECK_THAT(o.validate().message(), Catch::Contains("outer.momentum must be in [0, 1)"));
  o = {};
  o.learning_rate = -1;
  CHECK_THAT(o.validate().message(), Catch::Contains("outer.lr must be in (0, 10]"));
  o = {};
  o.clip_norm = -1;
  CHECK_THAT(o.validate().message(), Catch::Contains("outer.clip"));

  std::vector<float> theta{1.0f, 2.0f}, m{0.5f, 0.5f};
  const std::vector<float> bad{0.1f, std::numeric_limits<float>::quiet_NaN()};
  Status s = outer_step(theta, m, bad, OuterOptimizerOptions{});
  CHECK(s.code() == Err::non_finite);
  CHECK(theta == std::vector<float>{1.0f, 2.0f});
  CHECK(m == std::vector<float>{0.5f, 0.5f});
  const std::vector<float> short_delta{0.1f};
  CHECK(outer_step(theta, m, short_delta, OuterOptimizerOptions{}).code() == Err::invalid_argument);
}

TEST_CASE("outer optimizer: the stepped anchor computed aside is outer_step's, bit for bit, and changes nothing") {
  for (const auto algorithm : {OuterAlgorithm::nesterov, OuterAlgorithm::sgd}) {
    OuterOptimizerOptions o;
    o.algorithm = algorithm;
    o.learning_rate = 0.7;
    o.momentum = 0.9;
    const std::size_t n = 1001;
    std::vector<float> anchor(n), momentum(n), delta(n);
    for (std::size_t i = 0; i < n; ++i) {
      anchor[i] = std::sin(0.37f * static_cast<float>(i));
      momentum[i] = 0.01f * std::cos(0.11f * static_cast<float>(i));
      delta[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 29) - 14) / 3.0f;
    }
    for (const float scale : {1.0f, 0.3f}) {
      std::vector<float> a = anchor, m = momentum, aside(n);
      REQUIRE(outer_step(a, m, delta, o, scale).ok());
      REQUIRE(outer_stepped_anchor(anchor, momentum, delta, o, scale, aside).ok());
      CHECK(aside == a);
      CHECK(aside != anchor);
    }
    std::vector<float> aside(n), short_out(n - 1);
    CHECK(outer_stepped_anchor(anchor, momentum, delta, o, 1.0f, short_out).code() == Err::invalid_argument);
    delta[5] = std::numeric_limits<float>::quiet_NaN();
    CHECK(outer_stepped_anchor(anchor, momentum, delta, o, 1.0f, aside).code() == Err::non_finite);
  }
}
