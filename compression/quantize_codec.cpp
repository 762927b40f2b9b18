#include "compression/quantize_codec.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "compression/counter_rng.h"

namespace geoloco::compression {

namespace {
// Below this absmax a block is sent as zeros with scale 0: qmax/absmax would
// overflow to Inf. The error is then below 1e-30 per value.
constexpr float kTinyAbsmax = 1e-30f;
}  // namespace

QuantizeCodec::QuantizeCodec(const QuantizeSpec& spec, Simd simd)
    : spec_(spec), qmax_((1 << (spec.bits - 1)) - 1), k_(&kernels::kernel_table(simd)) {}

std::string QuantizeCodec::describe() const { return compression::describe(StageSpec(spec_)); }

void QuantizeCodec::write_params(ByteWriter& out) const {
  out.put<std::uint8_t>(static_cast<std::uint8_t>(spec_.bits));
  out.put<std::uint8_t>(static_cast<std::uint8_t>(spec_.rounding));
  out.put<std::uint32_t>(spec_.block);
}

Result<QuantizeSpec> QuantizeCodec::read_params(ByteReader& in) {
  QuantizeSpec spec;
  spec.bits = in.get<std::uint8_t>();
  const auto rounding = in.get<std::uint8_t>();
  spec.block = in.get<std::uint32_t>();
  GEOLOCO_RETURN_IF(in.failed(), Err::truncated, "quantize parameters are truncated");
  GEOLOCO_RETURN_IF(rounding > 1, Err::malformed, "quantize rounding ", int(rounding), " is unknown");
  spec.rounding = static_cast<Rounding>(rounding);
  Status valid = validate(PipelineSpec{{spec}});
  GEOLOCO_RETURN_IF(!valid.ok(), Err::malformed, "payload header: ", valid.message());
  return spec;
}

std::size_t QuantizeCodec::encoded_size(std::size_t n) const {
  const std::size_t blocks = (n + spec_.block - 1) / spec_.block;
  return blocks * sizeof(float) + (n * spec_.bits + 7) / 8;
}

void QuantizeCodec::pack(const std::int8_t* codes, std::size_t n, std::byte* out) const {
  switch (spec_.bits) {
    case 8:
      std::memcpy(out, codes, n);
      return;
    case 4:
      for (std::size_t i = 0; i < n; i += 2) {
        const unsigned lo = static_cast<unsigned>(codes[i]) & 0xfu;
        const unsigned hi = i + 1 < n ? static_cast<unsigned>(codes[i + 1]) & 0xfu : 0u;
        out[i / 2] = static_cast<std::byte>(lo | (hi << 4));
      }
      return;
    default:  // 2 bits
      for (std::size_t i = 0; i < n; i += 4) {
        unsigned byte = 0;
        for (std::size_t j = 0; j < 4 && i + j < n; ++j)
          byte |= (static_cast<unsigned>(codes[i + j]) & 0x3u) << (2 * j);
        out[i / 4] = static_cast<std::byte>(byte);
      }
  }
}

void QuantizeCodec::unpack(const std::byte* in, std::size_t n, std::int8_t* codes) const {
  switch (spec_.bits) {
    case 8:
      std::memcpy(codes, in, n);
      return;
    case 4:
      for (std::size_t i = 0; i < n; ++i) {
        const auto byte = static_cast<std::uint8_t>(in[i / 2]);
        const unsigned nibble = (i % 2 == 0) ? (byte & 0xfu) : (byte >> 4);
        codes[i] = static_cast<std::int8_t>(static_cast<int>(nibble << 28) >> 28);  // sign-extend 4 bits
      }
      return;
    default:
      for (std::size_t i = 0; i < n; ++i) {
        const auto byte = static_cast<std::uint8_t>(in[i / 4]);
        const unsigned bits = (byte >> (2 * (i % 4))) & 0x3u;
        codes[i] = static_cast<std::int8_t>(static_cast<int>(bits << 30) >> 30);  // sign-extend 2 bits
      }
  }
}

Status QuantizeCodec::encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t seed) const {
  const std::size_t n = in.size();
  GEOLOCO_RETURN_IF(out.size() < encoded_size(n), Err::invalid_argument, describe(), ": output buffer of ", out.size(),
                    " bytes is smaller than ", encoded_size(n));
  const std::size_t block = spec_.block;
  const std::size_t blocks = (n + block - 1) / block;
  std::byte* scales = out.data();
  std::byte* codes_out = out.data() + blocks * sizeof(float);
  std::vector<std::int8_t> codes(block);
  const float fqmax = static_cast<float>(qmax_);

  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * block;
    const std::size_t len = std::min(block, n - begin);
    const float* x = in.data() + begin;
    bool nonfinite = false;
    const float absmax = k_->absmax(x, len, &nonfinite);
    GEOLOCO_RETURN_IF(nonfinite, Err::non_finite, describe(), ": input has a NaN or Inf in elements [", begin, ", ",
                      begin + len, ")");
    float scale = 0.0f;
    if (absmax < kTinyAbsmax) {
      std::memset(codes.data(), 0, len);
    } else {
      scale = absmax / fqmax;
      const float inv = fqmax / absmax;
      if (spec_.rounding == Rounding::nearest) {
        k_->quantize_nearest(x, len, inv, qmax_, codes.data());
      } else {
        // floor(y + u) with u uniform in [0, 1) rounds up with probability
        // frac(y): unbiased. u is keyed by the element's index in the payload.
        for (std::size_t i = 0; i < len; ++i) {
          const float y = x[i] * inv + counter_uniform(seed, begin + i);
          const float q = std::min(std::max(std::floor(y), -fqmax), fqmax);
          codes[i] = static_cast<std::int8_t>(q);
        }
      }
    }
    std::memcpy(scales + b * sizeof(float), &scale, sizeof(float));
    pack(codes.data(), len, codes_out + begin * spec_.bits / 8);
  }
  return {};
}

template <class Block>
Status QuantizeCodec::each_block(std::span<const std::byte> in, std::size_t n, Block&& block_values) const {
  GEOLOCO_RETURN_IF(in.size() != encoded_size(n), Err::mismatch, describe(), ": ", in.size(), " bytes cannot hold ", n,
                    " values");
  const std::size_t block = spec_.block;
  const std::size_t blocks = (n + block - 1) / block;
  const std::byte* codes_in = in.data() + blocks * sizeof(float);
  std::vector<std::int8_t> codes(block);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * block;
    const std::size_t len = std::min(block, n - begin);
    float scale;
    std::memcpy(&scale, in.data() + b * sizeof(float), sizeof(float));
    GEOLOCO_RETURN_IF(!std::isfinite(scale) || scale < 0.0f, Err::malformed, describe(), ": block ", b, " has scale ",
                      scale, "; an encoder writes only finite scales >= 0");
    unpack(codes_in + begin * spec_.bits / 8, len, codes.data());
    block_values(begin, std::span<const std::int8_t>(codes.data(), len), scale);
  }
  return {};
}

Status QuantizeCodec::decode(std::span<const std::byte> in, std::span<float> out) const {
  return each_block(in, out.size(), [&](std::size_t begin, std::span<const std::int8_t> codes, float scale) {
    k_->dequantize(codes.data(), codes.size(), scale, out.data() + begin);
  });
}

Status QuantizeCodec::decode_add(std::span<const std::byte> in, std::span<float> sum, float share) const {
  std::vector<float> values(spec_.block);
  return each_block(in, sum.size(), [&](std::size_t begin, std::span<const std::int8_t> codes, float scale) {
    k_->dequantize(codes.data(), codes.size(), scale, values.data());
    add_scaled(sum.subspan(begin, codes.size()), std::span<const float>(values.data(), codes.size()), share);
  });
}

}  // namespace geoloco::compression
