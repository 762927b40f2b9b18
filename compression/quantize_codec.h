// quantize: blockwise absmax scaling to `bits`-bit signed integers.
//
// Wire layout for n values in blocks of B:
//   scales: ceil(n/B) fp32, scale = absmax / qmax (qmax = 2^(bits-1) - 1)
//   codes:  ceil(n*bits/8) bytes; codes packed little-end first, each block
//           starting on a byte boundary (B is a multiple of 8)
// Decoding is value = code * scale: one IEEE multiply, the same bits on
// every machine. Nearest rounding errs by at most scale/2 per value,
// stochastic rounding by less than scale and is unbiased.
#pragma once

#include "compression/codec.h"
#include "compression/kernels/kernels.h"
#include "compression/pipeline_spec.h"

namespace geoloco::compression {

class QuantizeCodec final : public ValueCodec {
 public:
  /// `spec` must have passed validate().
  explicit QuantizeCodec(const QuantizeSpec& spec, Simd simd = detected_simd());

  CodecId id() const override { return CodecId::quantize; }
  std::string describe() const override;
  bool lossy() const override { return true; }
  void write_params(ByteWriter& out) const override;
  /// Reads what write_params wrote. Errors: malformed (a value no encoder writes).
  static Result<QuantizeSpec> read_params(ByteReader& in);

  std::size_t encoded_size(std::size_t n) const override;
  Status encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t seed) const override;
  Status decode(std::span<const std::byte> in, std::span<float> out) const override;
  /// decode()'s values added into `sum` a block at a time, never held whole.
  Status decode_add(std::span<const std::byte> in, std::span<float> sum, float share) const override;

  int qmax() const { return qmax_; }

 private:
  void pack(const std::int8_t* codes, std::size_t n, std::byte* out) const;
  void unpack(const std::byte* in, std::size_t n, std::int8_t* codes) const;
  /// Checks the size and every block's scale, and calls
  /// block_values(first value, the block's codes, its scale) in order.
  /// Errors: decode()'s.
  template <class Block>
  Status each_block(std::span<const std::byte> in, std::size_t n, Block&& block_values) const;

  QuantizeSpec spec_;
  int qmax_;
  const kernels::KernelTable* k_;
};

}  // namespace geoloco::compression
