// Helpers shared by the compression tests.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "compression/pipeline.h"
#include "compression/synthetic_gradient.h"

namespace geoloco::compression::test {

inline std::vector<float> gradient(std::size_t n, std::uint64_t seed = 1) {
  std::vector<float> v(n);
  fill_synthetic_gradient(v, seed);
  return v;
}

inline Pipeline make_pipeline(std::vector<StageSpec> stages, Simd simd = detected_simd()) {
  auto p = Pipeline::create(PipelineSpec{std::move(stages)}, simd);
  if (!p.ok()) throw std::runtime_error(p.status().to_string());
  return std::move(p).value();
}

inline std::vector<std::byte> encode(Pipeline& p, const std::vector<float>& in, std::uint64_t seed = 7) {
  std::vector<std::byte> out(p.max_encoded_size(in.size()));
  auto size = p.encode(in, out, seed);
  if (!size.ok()) throw std::runtime_error(size.status().to_string());
  out.resize(*size);
  return out;
}

inline std::vector<float> decode(Pipeline& p, const std::vector<std::byte>& payload, std::size_t n) {
  std::vector<float> out(n);
  Status s = p.decode(payload, out);
  if (!s.ok()) throw std::runtime_error(s.to_string());
  return out;
}

inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return std::sqrt(num / den);
}

/// Every pipeline shape the tests cover.
inline std::vector<std::vector<StageSpec>> all_chains() {
  return {
      {},  // raw fp32
      {ZstdSpec{}},
      {Fp16Spec{}},
      {Bf16Spec{}},
      {QuantizeSpec{8, 128, Rounding::nearest}},
      {QuantizeSpec{4, 64, Rounding::stochastic}},
      {QuantizeSpec{2, 32, Rounding::nearest}},
      {TopkSpec{0.05, 256}},
      {TopkSpec{0.01, 4096}, QuantizeSpec{4, 128, Rounding::nearest}, ZstdSpec{3}},
      {TopkSpec{0.1, 512}, Fp16Spec{}, ZstdSpec{1}},
      {Bf16Spec{}, ZstdSpec{5}},
      {QuantizeSpec{8, 128, Rounding::stochastic}, ZstdSpec{3}},
  };
}

}  // namespace geoloco::compression::test
