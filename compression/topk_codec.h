// topk: in every block of B values keep the k of largest magnitude (ties go
// to the lower index), and send their indices and values.
//
// k is fixed per block, ceil(density * B), so the decoder knows how many
// indices each block holds; a last, shorter block of L values keeps
// ceil(k * L / B). Index section: for each block, its kept indices in
// ascending order as LEB128 gaps (first index, then index - previous - 1).
// The kept values go to the next stage (a value codec, or raw fp32).
#pragma once

#include "compression/codec.h"
#include "compression/kernels/kernels.h"
#include "compression/pipeline_spec.h"

namespace geoloco::compression {

class TopkCodec final : public Sparsifier {
 public:
  /// Keeps `k` of every `block` values; 1 <= k <= block <= 65536.
  TopkCodec(std::uint32_t block, std::uint32_t k, Simd simd = detected_simd());
  /// k = ceil(density * block), at least 1.
  static TopkCodec from_spec(const TopkSpec& spec, Simd simd = detected_simd());

  CodecId id() const override { return CodecId::topk; }
  std::string describe() const override;
  bool lossy() const override { return k_ < block_; }
  void write_params(ByteWriter& out) const override;
  /// Reads what write_params wrote: (block, k). Errors: truncated, malformed.
  static Result<TopkCodec> read_params(ByteReader& in, Simd simd = detected_simd());

  std::size_t kept_count(std::size_t n) const override;
  std::size_t max_index_bytes(std::size_t n) const override;
  Result<std::size_t> select(std::span<const float> in, std::span<std::byte> indices,
                             std::span<float> values) const override;
  Status scatter(std::span<const std::byte> indices, std::span<const float> values,
                 std::span<float> out) const override;

  std::uint32_t block() const { return block_; }
  std::uint32_t k() const { return k_; }
  /// Values kept from a block of `len` values (len <= block).
  std::uint32_t kept_in_block(std::size_t len) const;

 private:
  std::uint32_t block_;
  std::uint32_t k_;
  const kernels::KernelTable* kernels_;
};

}  // namespace geoloco::compression
