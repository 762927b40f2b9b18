#include "compression/error_feedback.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

namespace {
double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}
}  // namespace

TEST_CASE("error feedback: decoded outputs add up to the inputs, the gap is the bounded residual") {
  const std::vector<StageSpec> chain = GENERATE(
      std::vector<StageSpec>{TopkSpec{0.05, 1024}}, std::vector<StageSpec>{QuantizeSpec{2, 16, Rounding::nearest}},
      std::vector<StageSpec>{TopkSpec{0.05, 512}, QuantizeSpec{4, 128}, ZstdSpec{}});
  auto p = test::make_pipeline(chain);
  INFO(p.describe());
  const std::size_t n = 4000;
  const int rounds = 400;
  // Like real pseudo-gradients: a direction that persists across rounds plus noise.
  const auto persistent = test::gradient(n, 100);
  auto delta_of = [&](int r) {
    auto d = test::gradient(n, 1000 + r);
    for (std::size_t i = 0; i < n; ++i) d[i] += persistent[i];
    return d;
  };
  ErrorFeedback ef(n);
  std::vector<double> sum_in(n, 0.0), sum_out(n, 0.0), lost(n, 0.0);
  std::vector<float> out(n);
  std::vector<std::byte> payload(p.max_encoded_size(n));
  double max_residual = 0, max_delta_norm = 0;
  double delta_fraction = 0;  // the energy the compressor is sure to keep, where known
  if (chain.size() == 1 && std::holds_alternative<TopkSpec>(chain[0])) delta_fraction = 0.05;
  if (chain.size() == 1 && std::holds_alternative<QuantizeSpec>(chain[0])) delta_fraction = 1.0 / 16;
  for (int r = 1; r <= rounds; ++r) {
    auto delta = delta_of(r);
    auto size = ef.encode(p, 0, delta, payload, r);
    REQUIRE(size.ok());
    REQUIRE(p.decode(std::span(payload).first(*size), out).ok());
    // The same pipeline without feedback, for comparison.
    auto plain = test::decode(p, test::encode(p, delta, r), n);
    for (std::size_t i = 0; i < n; ++i) {
      sum_in[i] += delta[i];
      sum_out[i] += out[i];
      lost[i] += double(delta[i]) - plain[i];
    }
    max_residual = std::max(max_residual, ef.residual_norm());
    double dn = 0;
    for (float v : delta) dn += double(v) * v;
    max_delta_norm = std::max(max_delta_norm, std::sqrt(dn));
  }
  // Sum of inputs - sum of outputs is exactly the residual (up to float sums).
  std::vector<double> gap(n);
  for (std::size_t i = 0; i < n; ++i) gap[i] = sum_in[i] - sum_out[i] - ef.residual()[i];
  CHECK(norm(gap) < 1e-4 * norm(sum_in));
  // Tracking: the gap is a small fraction of all that was sent in, and far
  // below what the same pipeline without feedback loses.
  CHECK(ef.residual_norm() < 0.1 * norm(sum_in));
  CHECK(ef.residual_norm() < 0.5 * norm(lost));
  // Bounded: for a compressor that keeps at least a fraction d of the energy
  // (topk: d = k / block; 2-bit nearest: the block's largest value is exact,
  // d = 1 / block), ||e|| <= sqrt(1-d) / (1 - sqrt(1-d)) * max ||delta||.
  if (delta_fraction > 0) {
    const double c = std::sqrt(1 - delta_fraction);
    CHECK(max_residual <= c / (1 - c) * max_delta_norm);
  }
}

TEST_CASE("error feedback refuses a range outside its tensor and keeps its residual on error") {
  auto p = test::make_pipeline({QuantizeSpec{4, 128}});
  ErrorFeedback ef(100);
  std::vector<float> delta(50, 1.0f);
  std::vector<std::byte> out(p.max_encoded_size(50));
  CHECK(ef.encode(p, 60, delta, out, 0).status().code() == Err::invalid_argument);
  REQUIRE(ef.encode(p, 50, delta, out, 0).ok());
  const std::vector<float> before(ef.residual().begin(), ef.residual().end());
  delta[3] = INFINITY;
  CHECK(ef.encode(p, 50, delta, out, 0).status().code() == Err::non_finite);
  CHECK(std::vector<float>(ef.residual().begin(), ef.residual().end()) == before);

  delta[3] = 1.0f;

  // A checkpoint's residual: the same encode, bit for bit, as the one it was kept from.
  ErrorFeedback restored(std::vector<float>(ef.residual().begin(), ef.residual().end()));
  std::vector<std::byte> out2(out.size());
  auto a = ef.encode(p, 50, delta, out, 0);
  auto b = restored.encode(p, 50, delta, out2, 0);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);
  CHECK(std::equal(out.begin(), out.begin() + static_cast<long>(*a), out2.begin()));
}

TEST_CASE("error feedback: a range cleared is zero, the rest kept, a range past the end clamped") {
  auto p = test::make_pipeline({QuantizeSpec{4, 128}});
  ErrorFeedback ef(100);
  std::vector<float> delta(100);
  for (std::size_t i = 0; i < delta.size(); ++i) delta[i] = 0.01f * static_cast<float>(i % 17) - 0.07f;
  std::vector<std::byte> out(p.max_encoded_size(100));
  REQUIRE(ef.encode(p, 0, delta, out, 0).ok());
  const std::vector<float> before(ef.residual().begin(), ef.residual().end());
  REQUIRE(std::count(before.begin(), before.end(), 0.0f) < 50);
  ef.clear_range(20, 30);
  const auto r = ef.residual();
  CHECK(std::all_of(r.begin() + 20, r.begin() + 50, [](float v) { return v == 0.0f; }));
  CHECK(std::equal(r.begin(), r.begin() + 20, before.begin()));
  CHECK(std::equal(r.begin() + 50, r.end(), before.begin() + 50));
  ef.clear_range(90, 1000);
  CHECK(std::all_of(r.begin() + 90, r.end(), [](float v) { return v == 0.0f; }));
  ef.clear_range(500, 10);  // outside: nothing
  CHECK(ef.residual().size() == 100);
}
