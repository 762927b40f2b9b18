// Finite-difference gradient checking for the CPU reference, shared by the
// op and model tests. Central differences, f'(x) ≈ (f(x+h) − f(x−h)) / 2h,
// with the step taken in fp32 and the actual distance between the two
// perturbed floats used as the denominator. Losses are computed in double
// so that the comparison measures the gradient code, not summation noise.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "inner/rng.h"

namespace geoloco::inner::testing {

/// Random values N(0, scale²) from a seed.
inline std::vector<float> random_vector(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

/// Σ a[i]·b[i] in double.
inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

struct GradCheckResult {
  std::size_t checked = 0;
  std::size_t failed = 0;
  double worst_error = 0.0;  ///< largest |fd − analytic| / (atol + rtol·|analytic|)
};

/// Compares `analytic` with central differences of `loss` over every element
/// of `x` (or every `stride`-th). Passes when |fd − an| <= atol + rtol·|an|.
inline GradCheckResult check_gradient(std::vector<float>& x, const std::vector<float>& analytic,
                                      const std::function<double()>& loss, double h, double atol, double rtol,
                                      const std::string& what, std::size_t stride = 1) {
  REQUIRE(x.size() == analytic.size());
  GradCheckResult r;
  for (std::size_t i = 0; i < x.size(); i += stride) {
    const float v = x[i];
    const float up = static_cast<float>(v + h);
    const float down = static_cast<float>(v - h);
    x[i] = up;
    const double lp = loss();
    x[i] = down;
    const double lm = loss();
    x[i] = v;
    const double fd = (lp - lm) / (static_cast<double>(up) - static_cast<double>(down));
    const double an = analytic[i];
    const double err = std::fabs(fd - an) / (atol + rtol * std::fabs(an));
    r.checked += 1;
    r.worst_error = std::max(r.worst_error, err);
    if (err > 1.0) {
      r.failed += 1;
      if (r.failed <= 5) UNSCOPED_INFO(what << "[" << i << "]: finite difference " << fd << ", analytic " << an);
    }
  }
  INFO(what << ": " << r.checked << " elements checked, worst error " << r.worst_error << " of the tolerance");
  CHECK(r.failed == 0);
  CHECK(r.checked > 0);
  return r;
}

}  // namespace geoloco::inner::testing
