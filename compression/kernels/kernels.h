// The inner loops of the codecs, each as a scalar reference and an AVX2 twin
// that must produce the same bytes. Codecs pick one set through
// `kernel_table(Simd)`; tests call both directly and compare.
//
// Bit-identity rules: one IEEE operation per step (this folder is compiled
// with -ffp-contract=off and never with fast-math), rounding in the default
// round-to-nearest-even mode, and reductions only where the result does not
// depend on order (max).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compression/simd.h"

namespace geoloco::compression::kernels {

/// Largest |x[i]|; sets *nonfinite when some x[i] is NaN or Inf.
using AbsmaxFn = float (*)(const float* x, std::size_t n, bool* nonfinite);
/// q[i] = clamp(round_to_nearest_even(x[i] * inv), -qmax, qmax).
using QuantizeNearestFn = void (*)(const float* x, std::size_t n, float inv, int qmax, std::int8_t* q);
/// out[i] = clamp(float(q[i]) * scale, -FLT_MAX, FLT_MAX): near FLT_MAX the
/// product can round to Inf (code -(qmax + 1) of a damaged payload, or qmax
/// times a scale from an absmax at FLT_MAX), and decoded values must be finite.
using DequantizeFn = void (*)(const std::int8_t* q, std::size_t n, float scale, float* out);
/// Saturating round-to-nearest-even casts of finite floats, and back.
/// The *_to_f32 decoders return false when an input encodes Inf or NaN.
using ToHalfFn = void (*)(const float* x, std::size_t n, std::uint16_t* out);
using FromHalfFn = bool (*)(const std::uint16_t* h, std::size_t n, float* out);
/// True when every x[i] is finite.
using AllFiniteFn = bool (*)(const float* x, std::size_t n);
/// Copies n floats (their bits) from x to out in one pass; true when every
/// value is finite. Either pointer may be unaligned (payload bytes). The raw
/// value codec's encode and decode: a copy that must refuse NaN and Inf.
using CopyFiniteFn = bool (*)(const void* x, std::size_t n, void* out);
/// sum[i] = sum[i] + share * x[i] for n floats read from x (unaligned
/// payload bytes), one multiply and one add per value in that order (the
/// bits of copy_finite then diloco::add_weighted); true when every x[i] is
/// finite. The raw codec's decode fused with the all-reduce's weighted sum.
using AddWeightedFiniteFn = bool (*)(const void* x, std::size_t n, float share, float* sum);

struct KernelTable {
  AbsmaxFn absmax;
  QuantizeNearestFn quantize_nearest;
  DequantizeFn dequantize;
  ToHalfFn f32_to_f16;
  FromHalfFn f16_to_f32;
  ToHalfFn f32_to_bf16;
  FromHalfFn bf16_to_f32;
  AllFiniteFn all_finite;
  CopyFiniteFn copy_finite;
  AddWeightedFiniteFn add_weighted_finite;
};

/// The kernels for `simd`; falls back to scalar where AVX2 was not compiled in.
const KernelTable& kernel_table(Simd simd);

const KernelTable& scalar_kernels();
#if defined(__x86_64__)
const KernelTable& avx2_kernels();
#endif

/// Scalar conversions of one value, shared by the scalar kernels and tests.
std::uint16_t f32_to_f16_one(float x);
float f16_to_f32_one(std::uint16_t h);
std::uint16_t f32_to_bf16_one(float x);
float bf16_to_f32_one(std::uint16_t h);

/// Largest finite fp16 value; fp16 casts saturate to it.
inline constexpr float kF16Max = 65504.0f;

}  // namespace geoloco::compression::kernels
