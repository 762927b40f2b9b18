// AVX2 + F16C kernels, compiled per function with target attributes (never
// with -march), chosen at run time by kernel_table(). Each must produce the
// same bytes as its scalar twin in scalar_kernels.cpp; the tails fall back to
// the scalar single-value code.
#if defined(__x86_64__)
#include <immintrin.h>

#include <bit>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "compression/kernels/kernels.h"

#define GEOLOCO_AVX2 __attribute__((target("avx2,f16c")))

namespace geoloco::compression::kernels {

namespace {

GEOLOCO_AVX2 float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

GEOLOCO_AVX2 float absmax_avx2(const float* x, std::size_t n, bool* nonfinite) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  __m256 m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
  __m256i bad = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    __m256i ea = _mm256_and_si256(_mm256_castps_si256(a), exp_mask);
    __m256i eb = _mm256_and_si256(_mm256_castps_si256(b), exp_mask);
    bad = _mm256_or_si256(bad, _mm256_or_si256(_mm256_cmpeq_epi32(ea, exp_mask), _mm256_cmpeq_epi32(eb, exp_mask)));
    m0 = _mm256_max_ps(m0, _mm256_and_ps(a, abs_mask));
    m1 = _mm256_max_ps(m1, _mm256_and_ps(b, abs_mask));
  }
  float m = hmax(_mm256_max_ps(m0, m1));
  bool any_bad = !_mm256_testz_si256(bad, bad);
  for (; i < n; ++i) {
    const float v = x[i];
    any_bad |= !std::isfinite(v);
    m = std::max(m, std::fabs(v));
  }
  *nonfinite = any_bad;
  return m;
}

GEOLOCO_AVX2 __m256i round_clamp(__m256 v, __m256 inv, __m256 lo, __m256 hi) {
  __m256 y = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, inv), lo), hi);
  return _mm256_cvtps_epi32(y);  // current rounding mode: nearest even
}

GEOLOCO_AVX2 void quantize_nearest_avx2(const float* x, std::size_t n, float inv, int qmax, std::int8_t* q) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 hi = _mm256_set1_ps(static_cast<float>(qmax));
  const __m256 lo = _mm256_set1_ps(-static_cast<float>(qmax));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = round_clamp(_mm256_loadu_ps(x + i), vinv, lo, hi);
    __m256i b = round_clamp(_mm256_loadu_ps(x + i + 8), vinv, lo, hi);
    __m256i c = round_clamp(_mm256_loadu_ps(x + i + 16), vinv, lo, hi);
    __m256i d = round_clamp(_mm256_loadu_ps(x + i + 24), vinv, lo, hi);
    __m256i ab = _mm256_packs_epi32(a, b);  // lanes interleave; fixed below
    __m256i cd = _mm256_packs_epi32(c, d);
    __m256i abcd = _mm256_packs_epi16(ab, cd);
    abcd = _mm256_permutevar8x32_epi32(abcd, order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), abcd);
  }
  const float fhi = static_cast<float>(qmax);
  for (; i < n; ++i) {
    float y = std::min(std::max(x[i] * inv, -fhi), fhi);
    q[i] = static_cast<std::int8_t>(std::nearbyint(y));
  }
}

GEOLOCO_AVX2 void dequantize_avx2(const std::int8_t* q, std::size_t n, float scale, float* out) {
  const float big = std::numeric_limits<float>::max();
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 hi = _mm256_set1_ps(big), lo = _mm256_set1_ps(-big);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s);
    _mm256_storeu_ps(out + i, _mm256_min_ps(_mm256_max_ps(f, lo), hi));
  }
  for (; i < n; ++i) out[i] = std::min(std::max(static_cast<float>(q[i]) * scale, -big), big);
}

GEOLOCO_AVX2 void f32_to_f16_avx2(const float* x, std::size_t n, std::uint16_t* out) {
  const __m256 hi = _mm256_set1_ps(kF16Max), lo = _mm256_set1_ps(-kF16Max);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(x + i), lo), hi);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = f32_to_f16_one(x[i]);
}

GEOLOCO_AVX2 bool f16_to_f32_avx2(const std::uint16_t* h, std::size_t n, float* out) {
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  __m128i bad = _mm_setzero_si128();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(v, exp_mask), exp_mask));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(v));
  }
  bool ok = _mm_testz_si128(bad, bad);
  for (; i < n; ++i) {
    ok &= (h[i] & 0x7c00u) != 0x7c00u;
    out[i] = f16_to_f32_one(h[i]);
  }
  return ok;
}

GEOLOCO_AVX2 __m256i bf16_round(__m256i x) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i exp_mask = _mm256_set1_epi32(0x7f80), sign_mask = _mm256_set1_epi32(0x8000);
  const __m256i max_finite = _mm256_set1_epi32(0x7f7f);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
  __m256i h = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), lsb), 16);
  __m256i overflow = _mm256_cmpeq_epi32(_mm256_and_si256(h, exp_mask), exp_mask);
  __m256i saturated = _mm256_or_si256(_mm256_and_si256(h, sign_mask), max_finite);
  return _mm256_blendv_epi8(h, saturated, overflow);
}

GEOLOCO_AVX2 void f32_to_bf16_avx2(const float* x, std::size_t n, std::uint16_t* out) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i a = bf16_round(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    __m256i b = bf16_round(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)));
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = f32_to_bf16_one(x[i]);
}

GEOLOCO_AVX2 bool bf16_to_f32_avx2(const std::uint16_t* h, std::size_t n, float* out) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    __m256i f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(f, exp_mask), exp_mask));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), f);
  }
  bool ok = _mm256_testz_si256(bad, bad);
  for (; i < n; ++i) {
    ok &= (h[i] & 0x7f80u) != 0x7f80u;
    out[i] = bf16_to_f32_one(h[i]);
  }
  return ok;
}

GEOLOCO_AVX2 bool all_finite_avx2(const float* x, std::size_t n) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i e = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), exp_mask);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exp_mask));
  }
  bool ok = _mm256_testz_si256(bad, bad);
  for (; i < n; ++i) ok &= std::isfinite(x[i]);
  return ok;
}

GEOLOCO_AVX2 bool copy_finite_avx2(const void* from, std::size_t n, void* to) {
  const char* x = static_cast<const char*>(from);
  char* out = static_cast<char*>(to);
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 4 * i));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 4 * i + 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * i), v0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * i + 32), v1);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(v0, exp_mask), exp_mask));
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(v1, exp_mask), exp_mask));
  }
  bool ok = _mm256_testz_si256(bad, bad);
  for (; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + 4 * i, sizeof bits);
    std::memcpy(out + 4 * i, &bits, sizeof bits);
    ok &= (bits & 0x7f800000u) != 0x7f800000u;
  }
  return ok;
}

GEOLOCO_AVX2 bool add_weighted_finite_avx2(const void* from, std::size_t n, float share, float* sum) {
  const char* x = static_cast<const char*>(from);
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  const __m256 w = _mm256_set1_ps(share);
  __m256i bad = _mm256_setzero_si256();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 4 * i));
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exp_mask), exp_mask));
    // A multiply, then an add: two roundings, as the scalar loop (no FMA).
    _mm256_storeu_ps(sum + i, _mm256_add_ps(_mm256_loadu_ps(sum + i), _mm256_mul_ps(w, v)));
  }
  bool ok = _mm256_testz_si256(bad, bad);
  for (; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + 4 * i, sizeof bits);
    ok &= (bits & 0x7f800000u) != 0x7f800000u;
    sum[i] = sum[i] + share * std::bit_cast<float>(bits);
  }
  return ok;
}

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable table{absmax_avx2,      quantize_nearest_avx2,   dequantize_avx2,  f32_to_f16_avx2,
                                 f16_to_f32_avx2,  f32_to_bf16_avx2,        bf16_to_f32_avx2, all_finite_avx2,
                                 copy_finite_avx2, add_weighted_finite_avx2};
  return table;
}

}  // namespace geoloco::compression::kernels
#endif  // __x86_64__
