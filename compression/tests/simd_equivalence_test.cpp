// The AVX2 kernels and the scalar ones must produce the same bytes, so sites
// with different CPUs decode the same values (docs/design.md §1).
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/digest.h"
#include "compression/counter_rng.h"
#include "compression/kernels/kernels.h"
#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

namespace {
bool have_avx2() { return cpu_has_avx2_f16c(); }

// Gradient-like values plus the edge cases: zeros of both signs, subnormals,
// fp16's rounding ties and overflow, and random bit patterns.
std::vector<float> edge_values() {
  auto v = test::gradient(30011, 17);
  const float edges[] = {
      0.0f,     -0.0f,    1e-45f, -1e-40f, 0x1p-24f,        0x1p-25f,       3 * 0x1p-26f,        65504.0f,
      65519.0f, 65520.0f, -1e9f,  3.4e38f, 1.0f + 0x1p-11f, 1.0f + 0x1p-8f, 2.0f + 3 * 0x1p-11f, 5.96e-8f};
  v.insert(v.begin(), std::begin(edges), std::end(edges));
  for (std::uint64_t i = 0; i < 20000; ++i) {
    std::uint32_t bits = static_cast<std::uint32_t>(counter_random(4, i));
    if ((bits & 0x7f800000u) == 0x7f800000u) bits &= 0xbfffffffu;  // keep finite
    v.push_back(std::bit_cast<float>(bits));
  }
  return v;
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
}  // namespace

TEST_CASE("AVX2 kernels produce the same bytes as the scalar kernels") {
  if (!have_avx2()) {
    WARN("SKIPPED: this CPU has no AVX2/F16C: only the scalar kernels exist here, nothing to compare");
    return;
  }
  const auto& s = kernels::scalar_kernels();
  const auto& a = kernels::avx2_kernels();
  auto x = edge_values();
  for (std::size_t n : {x.size(), std::size_t{7}, std::size_t{33}, std::size_t{1000}}) {
    INFO("n = " << n);
    bool bad_s = true, bad_a = true;
    CHECK(std::bit_cast<std::uint32_t>(s.absmax(x.data(), n, &bad_s)) ==
          std::bit_cast<std::uint32_t>(a.absmax(x.data(), n, &bad_a)));
    CHECK(bad_s == bad_a);

    for (int qmax : {127, 7, 1}) {
      std::vector<std::int8_t> qs(n), qa(n);
      s.quantize_nearest(x.data(), n, 1e-3f * qmax, qmax, qs.data());
      a.quantize_nearest(x.data(), n, 1e-3f * qmax, qmax, qa.data());
      CHECK(same_bytes(qs, qa));
      std::vector<float> ds(n), da(n);
      s.dequantize(qs.data(), n, 0.37f, ds.data());
      a.dequantize(qs.data(), n, 0.37f, da.data());
      CHECK(same_bytes(ds, da));
    }

    std::vector<std::uint16_t> hs(n), ha(n);
    s.f32_to_f16(x.data(), n, hs.data());
    a.f32_to_f16(x.data(), n, ha.data());
    CHECK(same_bytes(hs, ha));
    s.f32_to_bf16(x.data(), n, hs.data());
    a.f32_to_bf16(x.data(), n, ha.data());
    CHECK(same_bytes(hs, ha));
  }

  // Every one of the 65536 half patterns decodes the same way.
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> fs(all.size()), fa(all.size());
  CHECK(s.f16_to_f32(all.data(), all.size(), fs.data()) == a.f16_to_f32(all.data(), all.size(), fa.data()));
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!std::isnan(fs[i])) REQUIRE(std::bit_cast<std::uint32_t>(fs[i]) == std::bit_cast<std::uint32_t>(fa[i]));
  CHECK(s.bf16_to_f32(all.data(), all.size(), fs.data()) == a.bf16_to_f32(all.data(), all.size(), fa.data()));
  CHECK(same_bytes(fs, fa));

  std::vector<float> finite(1000, 1.0f);
  CHECK(s.all_finite(finite.data(), finite.size()));
  CHECK(a.all_finite(finite.data(), finite.size()));
  finite[997] = -std::numeric_limits<float>::infinity();
  CHECK_FALSE(s.all_finite(finite.data(), finite.size()));
  CHECK_FALSE(a.all_finite(finite.data(), finite.size()));

  // copy_finite: the same bits on both paths, from and to unaligned bytes,
  // tails included, and a NaN or Inf anywhere (tail or vector part) is caught.
  std::vector<float> clean;
  for (float v : x)
    if (std::isfinite(v)) clean.push_back(v);
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17}, clean.size()}) {
    n = std::min(n, clean.size());
    std::vector<std::byte> src(n * 4 + 1), ds(n * 4 + 3), da(n * 4 + 3);
    std::memcpy(src.data() + 1, clean.data(), n * 4);
    CHECK(s.copy_finite(src.data() + 1, n, ds.data() + 3));
    CHECK(a.copy_finite(src.data() + 1, n, da.data() + 3));
    CHECK(std::memcmp(ds.data() + 3, clean.data(), n * 4) == 0);
    CHECK(std::memcmp(da.data() + 3, clean.data(), n * 4) == 0);
  }
  // add_weighted_finite: the same sums on both paths, read from unaligned
  // bytes, and each the bits of a multiply then an add.
  for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{9}, clean.size()}) {
    std::vector<std::byte> src(n * 4 + 1);
    std::memcpy(src.data() + 1, clean.data(), n * 4);
    std::vector<float> ss(clean.rbegin(), clean.rbegin() + static_cast<std::ptrdiff_t>(n)), sa = ss, expected = ss;
    for (std::size_t i = 0; i < n; ++i) expected[i] = expected[i] + 0.7f * clean[i];
    CHECK(s.add_weighted_finite(src.data() + 1, n, 0.7f, ss.data()));
    CHECK(a.add_weighted_finite(src.data() + 1, n, 0.7f, sa.data()));
    CHECK(same_bytes(ss, expected));
    CHECK(same_bytes(sa, expected));
  }
  for (float poison : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (std::size_t at : {std::size_t{3}, std::size_t{40}, std::size_t{41}}) {  // 41: in the tail of 42
      std::vector<float> v(42, 0.5f), out(42);
      v[at] = poison;
      CHECK_FALSE(s.copy_finite(v.data(), v.size(), out.data()));
      CHECK_FALSE(a.copy_finite(v.data(), v.size(), out.data()));
      CHECK_FALSE(s.add_weighted_finite(v.data(), v.size(), 1.0f, out.data()));
      CHECK_FALSE(a.add_weighted_finite(v.data(), v.size(), 1.0f, out.data()));
    }
  }
}

TEST_CASE("whole pipelines give the same payload bytes and decoded values on both paths") {
  if (!have_avx2()) {
    WARN("SKIPPED: this CPU has no AVX2/F16C: nothing to compare");
    return;
  }
  auto x = edge_values();
  for (auto& v : x) v = std::fabs(v) > 1e30f ? 1.0f : v;  // keep quantize scales finite
  for (const auto& chain : test::all_chains()) {
    auto ps = test::make_pipeline(chain, Simd::scalar);
    auto pa = test::make_pipeline(chain, Simd::avx2);
    INFO(ps.describe());
    auto es = test::encode(ps, x, 5);
    auto ea = test::encode(pa, x, 5);
    CHECK(xxh3_64(es) == xxh3_64(ea));
    CHECK(digest_f32(test::decode(ps, es, x.size())) == digest_f32(test::decode(pa, es, x.size())));
  }
}

TEST_CASE("fp16 scalar conversion is exact on every half pattern and ties round to even") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00u) == 0x7c00u) continue;  // Inf/NaN never encoded
    const float f = kernels::f16_to_f32_one(static_cast<std::uint16_t>(h));
    REQUIRE(kernels::f32_to_f16_one(f) == (h == 0x8000u ? 0x8000u : h));
  }
  CHECK(kernels::f32_to_f16_one(1.0f + 0x1p-11f) == 0x3c00);      // tie -> even (1.0)
  CHECK(kernels::f32_to_f16_one(1.0f + 3 * 0x1p-11f) == 0x3c02);  // tie -> even (1 + 2^-9)
  CHECK(kernels::f32_to_f16_one(0x1p-25f) == 0x0000);             // half the smallest subnormal -> even (0)
  CHECK(kernels::f32_to_f16_one(3 * 0x1p-26f) == 0x0001);
}
