// Scalar reference kernels: written to be read. The AVX2 kernels must match
// these bit for bit.
#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>
#include <limits>

#include "compression/kernels/kernels.h"

namespace geoloco::compression::kernels {

namespace {

bool is_finite_bits(std::uint32_t bits) { return (bits & 0x7f800000u) != 0x7f800000u; }

float absmax_scalar(const float* x, std::size_t n, bool* nonfinite) {
  float m = 0.0f;
  bool bad = false;
  for (std::size_t i = 0; i < n; ++i) {
    bad |= !is_finite_bits(std::bit_cast<std::uint32_t>(x[i]));
    m = std::max(m, std::fabs(x[i]));
  }
  *nonfinite = bad;
  return m;
}

void quantize_nearest_scalar(const float* x, std::size_t n, float inv, int qmax, std::int8_t* q) {
  const float hi = static_cast<float>(qmax);
  for (std::size_t i = 0; i < n; ++i) {
    float y = x[i] * inv;
    y = std::min(std::max(y, -hi), hi);
    q[i] = static_cast<std::int8_t>(std::nearbyint(y));
  }
}

void dequantize_scalar(const std::int8_t* q, std::size_t n, float scale, float* out) {
  const float big = std::numeric_limits<float>::max();
  for (std::size_t i = 0; i < n; ++i) out[i] = std::min(std::max(static_cast<float>(q[i]) * scale, -big), big);
}

void f32_to_f16_scalar(const float* x, std::size_t n, std::uint16_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f32_to_f16_one(x[i]);
}

bool f16_to_f32_scalar(const std::uint16_t* h, std::size_t n, float* out) {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    ok &= (h[i] & 0x7c00u) != 0x7c00u;
    out[i] = f16_to_f32_one(h[i]);
  }
  return ok;
}

void f32_to_bf16_scalar(const float* x, std::size_t n, std::uint16_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f32_to_bf16_one(x[i]);
}

bool bf16_to_f32_scalar(const std::uint16_t* h, std::size_t n, float* out) {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    ok &= (h[i] & 0x7f80u) != 0x7f80u;
    out[i] = bf16_to_f32_one(h[i]);
  }
  return ok;
}

bool all_finite_scalar(const float* x, std::size_t n) {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) ok &= is_finite_bits(std::bit_cast<std::uint32_t>(x[i]));
  return ok;
}

bool copy_finite_scalar(const void* x, std::size_t n, void* out) {
  std::memcpy(out, x, n * sizeof(float));
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, static_cast<const char*>(x) + i * sizeof bits, sizeof bits);
    ok &= is_finite_bits(bits);
  }
  return ok;
}

bool add_weighted_finite_scalar(const void* x, std::size_t n, float share, float* sum) {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, static_cast<const char*>(x) + i * sizeof bits, sizeof bits);
    ok &= is_finite_bits(bits);
    sum[i] = sum[i] + share * std::bit_cast<float>(bits);
  }
  return ok;
}

}  // namespace

std::uint16_t f32_to_f16_one(float value) {
  // Saturate first, so that values past the fp16 range become +-65504, not Inf.
  value = std::min(std::max(value, -kF16Max), kF16Max);
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax < 0x38800000u) {
    // Below 2^-14: an fp16 subnormal (or zero) m * 2^-24. Scaling by 2^24 is
    // exact, and nearbyint rounds half to even like the hardware does.
    const float m = std::nearbyint(std::bit_cast<float>(ax) * 0x1p24f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(m));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa
  // bits to nearest even; a carry correctly bumps the exponent.
  std::uint32_t h = (ax >> 13) - (112u << 10);
  const std::uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

float f16_to_f32_one(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 0x1p-24f;  // exact
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

std::uint16_t f32_to_bf16_one(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  std::uint32_t h = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;   // round to nearest even
  if ((h & 0x7f80u) == 0x7f80u) h = (h & 0x8000u) | 0x7f7fu;  // saturate, never Inf
  return static_cast<std::uint16_t>(h);
}

float bf16_to_f32_one(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

const KernelTable& scalar_kernels() {
  static const KernelTable table{absmax_scalar,      quantize_nearest_scalar,   dequantize_scalar,  f32_to_f16_scalar,
                                 f16_to_f32_scalar,  f32_to_bf16_scalar,        bf16_to_f32_scalar, all_finite_scalar,
                                 copy_finite_scalar, add_weighted_finite_scalar};
  return table;
}

const KernelTable& kernel_table(Simd simd) {
#if defined(__x86_64__)
  if (simd == Simd::avx2) return avx2_kernels();
#endif
  (void)simd;
  return scalar_kernels();
}

}  // namespace geoloco::compression::kernels
