#include "compression/cast_codec.h"

#include <algorithm>
#include <cstring>

namespace geoloco::compression {

namespace {
// Tiles small enough to stay in L1 between the finiteness check and the cast,
// so the input is read from memory once.
constexpr std::size_t kTile = 4096;
}  // namespace

CastCodec::CastCodec(Format format, Simd simd) : format_(format) {
  const auto& k = kernels::kernel_table(simd);
  to_half_ = format == Format::fp16 ? k.f32_to_f16 : k.f32_to_bf16;
  from_half_ = format == Format::fp16 ? k.f16_to_f32 : k.bf16_to_f32;
  all_finite_ = k.all_finite;
}

Status CastCodec::encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t) const {
  GEOLOCO_RETURN_IF(out.size() < encoded_size(in.size()), Err::invalid_argument, describe(), ": output buffer of ",
                    out.size(), " bytes is smaller than ", encoded_size(in.size()));
  // The output may be unaligned for uint16_t: write through an aligned tile.
  alignas(32) std::uint16_t tile[kTile];
  for (std::size_t i = 0; i < in.size(); i += kTile) {
    const std::size_t n = std::min(kTile, in.size() - i);
    GEOLOCO_RETURN_IF(!all_finite_(in.data() + i, n), Err::non_finite, describe(),
                      ": input has a NaN or Inf in elements [", i, ", ", i + n, ")");
    to_half_(in.data() + i, n, tile);
    std::memcpy(out.data() + 2 * i, tile, 2 * n);
  }
  return {};
}

Status CastCodec::decode(std::span<const std::byte> in, std::span<float> out) const {
  GEOLOCO_RETURN_IF(in.size() != encoded_size(out.size()), Err::mismatch, describe(), ": ", in.size(),
                    " bytes cannot hold ", out.size(), " values");
  alignas(32) std::uint16_t tile[kTile];
  for (std::size_t i = 0; i < out.size(); i += kTile) {
    const std::size_t n = std::min(kTile, out.size() - i);
    std::memcpy(tile, in.data() + 2 * i, 2 * n);
    GEOLOCO_RETURN_IF(!from_half_(tile, n, out.data() + i), Err::malformed, describe(),
                      ": payload holds an Inf or NaN in elements [", i, ", ", i + n, ")");
  }
  return {};
}

}  // namespace geoloco::compression
