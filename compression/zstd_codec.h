// zstd: the lossless entropy stage over the bytes the earlier stages wrote.
// Holds one compression and one decompression context, so a codec object is
// used by one thread at a time (as its Pipeline is).
#pragma once

#include <memory>

#include "compression/codec.h"
#include "compression/pipeline_spec.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace geoloco::compression {

class ZstdCodec final : public ByteCodec {
 public:
  explicit ZstdCodec(const ZstdSpec& spec);
  ~ZstdCodec() override;
  ZstdCodec(ZstdCodec&&) noexcept;
  ZstdCodec& operator=(ZstdCodec&&) noexcept;

  CodecId id() const override { return CodecId::zstd; }
  std::string describe() const override;
  void write_params(ByteWriter& out) const override;
  /// Reads what write_params wrote. Errors: truncated, malformed.
  static Result<ZstdSpec> read_params(ByteReader& in);

  std::size_t max_encoded_size(std::size_t raw_size) const override;
  Result<std::size_t> encode(std::span<const std::byte> in, std::span<std::byte> out) const override;
  Status decode(std::span<const std::byte> in, std::span<std::byte> out) const override;

 private:
  struct Contexts;
  ZstdSpec spec_;
  std::unique_ptr<Contexts> ctx_;
};

}  // namespace geoloco::compression
