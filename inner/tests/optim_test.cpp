// AdamW, the warmup + cosine schedule and gradient clipping against values
// computed by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "inner/cpu/adamw.h"
#include "inner/optim/clip.h"
#include "inner/optim/schedule.h"

using namespace geoloco;
using namespace geoloco::inner;

TEST_CASE("AdamW first steps match hand computation", "[optim]") {
  cpu::AdamWOptions o;
  o.beta1 = 0.9, o.beta2 = 0.999, o.epsilon = 1e-8, o.weight_decay = 0.1;
  // Parameter 0 gets weight decay, parameter 1 does not.
  cpu::AdamW adam(2, o, {{0, 1}});
  std::vector<float> p = {1.0f, 1.0f};
  std::vector<float> g = {0.5f, -2.0f};
  REQUIRE(adam.step(p, g, 0.01).ok());
  // Step 1: m̂ = g, v̂ = g², so the update is lr·sign(g) (up to ε);
  // decay first multiplies θ by 1 − lr·wd = 0.999.
  CHECK(p[0] == Approx(0.999 - 0.01).epsilon(1e-6));
  CHECK(p[1] == Approx(1.0 + 0.01).epsilon(1e-6));
  CHECK(adam.first_moment()[0] == Approx(0.05));
  CHECK(adam.second_moment()[1] == Approx(0.004));

  // Step 2 with g = (0.25, −2):
  //   m0 = 0.9·0.05 + 0.1·0.25 = 0.07;  v0 = 0.999·2.5e-4 + 0.001·0.0625 = 3.1225e-4
  //   m̂0 = 0.07 / 0.19;  v̂0 = 3.1225e-4 / (1 − 0.999²) = 3.1225e-4 / 0.001999
  g = {0.25f, -2.0f};
  const double theta = 0.989;
  REQUIRE(adam.step(p, g, 0.01).ok());
  const double m_hat = 0.07 / 0.19;
  const double v_hat = 3.1225e-4 / 0.001999;
  const double expected = theta * (1.0 - 0.01 * 0.1) - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8);
  CHECK(p[0] == Approx(expected).epsilon(1e-5));
  // A constant gradient keeps the bias-corrected step at exactly lr.
  CHECK(p[1] == Approx(1.02).epsilon(1e-6));
  CHECK(adam.steps() == 2);

  std::vector<float> wrong(3);
  CHECK(adam.step(wrong, g, 0.01).code() == Err::invalid_argument);
  o.beta2 = 1.0;
  CHECK(o.validate().code() == Err::invalid_argument);
}

TEST_CASE("warmup then cosine schedule", "[optim]") {
  ScheduleOptions s;
  s.lr = 1.0, s.warmup_steps = 4, s.total_steps = 14, s.min_lr_fraction = 0.1;
  REQUIRE(s.validate().ok());
  CHECK(learning_rate(s, 0) == Approx(0.25));
  CHECK(learning_rate(s, 3) == Approx(1.0));
  CHECK(learning_rate(s, 4) == Approx(1.0));         // cosine starts at the peak
  CHECK(learning_rate(s, 9) == Approx(0.1 + 0.45));  // halfway: (lr + min)/2
  CHECK(learning_rate(s, 14) == Approx(0.1));        // the floor
  CHECK(learning_rate(s, 1000) == Approx(0.1));
  // A quarter of the way: min + ½(lr − min)(1 + cos(π/4))
  s.warmup_steps = 0, s.total_steps = 8;
  CHECK(learning_rate(s, 2) == Approx(0.1 + 0.45 * (1.0 + std::sqrt(0.5))));
  s.total_steps = 0;
  CHECK(learning_rate(s, 12345) == Approx(1.0));

  ScheduleOptions bad = s;
  bad.warmup_steps = 10, bad.total_steps = 5;
  CHECK(bad.validate().code() == Err::invalid_argument);
  CHECK(bad.validate().message().find("must not exceed total_steps") != std::string::npos);
}

TEST_CASE("a per-phase warmup ramps the rate again at the start of every phase of H steps", "[optim]") {
  ScheduleOptions s;
  s.lr = 1.0, s.warmup_steps = 0, s.total_steps = 0, s.phase_steps = 10, s.phase_warmup = 4;
  REQUIRE(s.validate().ok());
  // Phase 0: steps 0-9, phase 1: steps 10-19; each ramps over its first 4 steps.
  CHECK(learning_rate(s, 0) == 0.25);
  CHECK(learning_rate(s, 2) == 0.75);
  CHECK(learning_rate(s, 3) == 1.0);
  CHECK(learning_rate(s, 9) == 1.0);
  CHECK(learning_rate(s, 10) == 0.25);
  CHECK(learning_rate(s, 11) == 0.5);
  CHECK(learning_rate(s, 14) == 1.0);
  // On top of the job's schedule: the cosine's rate at that step, scaled.
  ScheduleOptions c = s;
  c.total_steps = 40, c.min_lr_fraction = 0.1;
  ScheduleOptions plain = c;
  plain.phase_warmup = 0;
  for (std::uint64_t step : {20u, 21u, 25u}) {
    const double ramp = std::min(1.0, static_cast<double>(step % 10 + 1) / 4.0);
    CHECK(learning_rate(c, step) == Approx(learning_rate(plain, step) * ramp));
  }
  CHECK(learning_rate(c, 21) < learning_rate(plain, 21));

  ScheduleOptions bad = s;
  bad.phase_warmup = 11;
  CHECK(bad.validate().message().find("must not exceed the phase (10 steps)") != std::string::npos);
  bad.phase_steps = 0, bad.phase_warmup = 2;
  CHECK(bad.validate().message().find("needs inner phases of a fixed number of steps") != std::string::npos);
}

TEST_CASE("global gradient-norm clipping", "[optim]") {
  std::vector<float> g = {3.0f, 4.0f, 0.0f};  // norm 5
  auto n = clip_global_norm(g, 10.0);
  REQUIRE(n.ok());
  CHECK(*n == Approx(5.0));
  CHECK(g == std::vector<float>{3.0f, 4.0f, 0.0f});  // under the bound: untouched
  n = clip_global_norm(g, 1.0);
  REQUIRE(n.ok());
  CHECK(*n == Approx(5.0));
  CHECK(g[0] == Approx(0.6));
  CHECK(g[1] == Approx(0.8));
  CHECK(global_norm(g) == Approx(1.0));
  std::vector<float> nan = {1.0f, std::nanf("")};
  CHECK(clip_global_norm(nan, 1.0).status().code() == Err::non_finite);
}
