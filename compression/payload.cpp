#include "compression/payload.h"

#include <cstring>

#include "common/byte_io.h"

namespace geoloco::compression {

Result<PayloadHeader> parse_payload_header(std::span<const std::byte> payload) {
  ByteReader in(payload);
  const auto magic = in.get<std::uint32_t>();
  const auto version = in.get<std::uint8_t>();
  PayloadHeader h;
  h.stage_count = in.get<std::uint8_t>();
  const auto descriptor_size = in.get<std::uint16_t>();
  h.element_count = in.get<std::uint64_t>();
  h.raw_body_size = in.get<std::uint64_t>();
  h.body_size = in.get<std::uint64_t>();
  GEOLOCO_RETURN_IF(in.failed(), Err::truncated, "payload: ", payload.size(), " bytes, shorter than the ",
                    kPayloadFixedHeaderSize, "-byte header");
  GEOLOCO_RETURN_IF(magic != kPayloadMagic, Err::malformed, "payload: bad magic, this is not a geoloco payload");
  GEOLOCO_RETURN_IF(version != kPayloadVersion, Err::unsupported, "payload: version ", int(version),
                    " is not supported (this build reads version ", int(kPayloadVersion), ")");
  GEOLOCO_RETURN_IF(h.stage_count > 3, Err::malformed, "payload: ", int(h.stage_count),
                    " stages; a pipeline has 0 (raw fp32) to 3");
  h.descriptor = in.get_bytes(descriptor_size);
  GEOLOCO_RETURN_IF(in.failed(), Err::truncated, "payload: stage descriptors end past the payload's ", payload.size(),
                    " bytes");
  GEOLOCO_RETURN_IF(in.remaining() < h.body_size, Err::truncated, "payload: body of ", h.body_size,
                    " bytes announced, ", in.remaining(), " present");
  GEOLOCO_RETURN_IF(in.remaining() > h.body_size, Err::malformed, "payload: ", in.remaining() - h.body_size,
                    " trailing bytes after the body");
  h.body = in.get_bytes(static_cast<std::size_t>(h.body_size));
  return h;
}

void write_payload_header(const PayloadHeader& h, std::span<std::byte> out) {
  ByteWriter w(out);
  w.put<std::uint32_t>(kPayloadMagic);
  w.put<std::uint8_t>(kPayloadVersion);
  w.put<std::uint8_t>(h.stage_count);
  w.put<std::uint16_t>(static_cast<std::uint16_t>(h.descriptor.size()));
  w.put<std::uint64_t>(h.element_count);
  w.put<std::uint64_t>(h.raw_body_size);
  w.put<std::uint64_t>(h.body_size);
  w.put_bytes(h.descriptor);
}

}  // namespace geoloco::compression
