// fp16 and bf16: cast each float to 16 bits (round to nearest even) and back.
// fp16 saturates at +-65504; bf16 keeps fp32's range and never rounds to Inf.
// Decoding refuses a payload holding an Inf or NaN pattern.
#pragma once

#include "compression/codec.h"
#include "compression/kernels/kernels.h"

namespace geoloco::compression {

class CastCodec final : public ValueCodec {
 public:
  enum class Format { fp16, bf16 };
  explicit CastCodec(Format format, Simd simd = detected_simd());

  CodecId id() const override { return format_ == Format::fp16 ? CodecId::fp16 : CodecId::bf16; }
  std::string describe() const override { return format_ == Format::fp16 ? "fp16" : "bf16"; }
  bool lossy() const override { return true; }
  void write_params(ByteWriter&) const override {}

  std::size_t encoded_size(std::size_t n) const override { return 2 * n; }
  Status encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t seed) const override;
  Status decode(std::span<const std::byte> in, std::span<float> out) const override;

 private:
  Format format_;
  kernels::ToHalfFn to_half_;
  kernels::FromHalfFn from_half_;
  kernels::AllFiniteFn all_finite_;
};

}  // namespace geoloco::compression
