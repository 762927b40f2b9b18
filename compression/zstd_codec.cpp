#include "compression/zstd_codec.h"

#include <zstd.h>

namespace geoloco::compression {

struct ZstdCodec::Contexts {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~Contexts() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};

ZstdCodec::ZstdCodec(const ZstdSpec& spec) : spec_(spec), ctx_(std::make_unique<Contexts>()) {}
ZstdCodec::~ZstdCodec() = default;
ZstdCodec::ZstdCodec(ZstdCodec&&) noexcept = default;
ZstdCodec& ZstdCodec::operator=(ZstdCodec&&) noexcept = default;

std::string ZstdCodec::describe() const { return compression::describe(StageSpec(spec_)); }

void ZstdCodec::write_params(ByteWriter& out) const { out.put<std::int32_t>(spec_.level); }

Result<ZstdSpec> ZstdCodec::read_params(ByteReader& in) {
  ZstdSpec spec;
  spec.level = in.get<std::int32_t>();
  GEOLOCO_RETURN_IF(in.failed(), Err::truncated, "zstd parameters are truncated");
  GEOLOCO_RETURN_IF(spec.level < -7 || spec.level > 19, Err::malformed, "payload header: zstd level ", spec.level,
                    " is outside -7..19");
  return spec;
}

std::size_t ZstdCodec::max_encoded_size(std::size_t raw_size) const { return ZSTD_compressBound(raw_size); }

Result<std::size_t> ZstdCodec::encode(std::span<const std::byte> in, std::span<std::byte> out) const {
  GEOLOCO_RETURN_IF(ctx_->c == nullptr, Err::internal, "zstd: could not allocate a compression context");
  const std::size_t r = ZSTD_compressCCtx(ctx_->c, out.data(), out.size(), in.data(), in.size(), spec_.level);
  GEOLOCO_RETURN_IF(ZSTD_isError(r), Err::invalid_argument, "zstd: ", ZSTD_getErrorName(r));
  return r;
}

Status ZstdCodec::decode(std::span<const std::byte> in, std::span<std::byte> out) const {
  GEOLOCO_RETURN_IF(ctx_->d == nullptr, Err::internal, "zstd: could not allocate a decompression context");
  const unsigned long long content = ZSTD_getFrameContentSize(in.data(), in.size());
  GEOLOCO_RETURN_IF(content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN, Err::malformed,
                    "zstd: the body is not a zstd frame with a known size");
  GEOLOCO_RETURN_IF(content != out.size(), Err::malformed, "zstd: frame holds ", content, " bytes, header says ",
                    out.size());
  const std::size_t r = ZSTD_decompressDCtx(ctx_->d, out.data(), out.size(), in.data(), in.size());
  GEOLOCO_RETURN_IF(ZSTD_isError(r), Err::malformed, "zstd: ", ZSTD_getErrorName(r));
  GEOLOCO_RETURN_IF(r != out.size(), Err::malformed, "zstd: decoded ", r, " bytes, expected ", out.size());
  return {};
}

}  // namespace geoloco::compression
