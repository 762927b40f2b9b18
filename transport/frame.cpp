#include "transport/frame.h"

#include "common/byte_io.h"
#include "common/digest.h"

namespace geoloco::transport {

std::string_view frame_type_name(FrameType type) {
  switch (type) {
    case FrameType::hello:
      return "hello";
    case FrameType::shard:
      return "shard";
    case FrameType::gather:
      return "gather";
    case FrameType::keepalive:
      return "keepalive";
    case FrameType::control:
      return "control";
    case FrameType::state:
      return "state";
    case FrameType::redial:
      return "redial";
    case FrameType::goodbye:
      return "goodbye";
    case FrameType::knock:
      return "knock";
  }
  return "unknown";
}

bool may_skip_hash(FrameType type) { return type == FrameType::shard || type == FrameType::gather; }

void seal(FrameHeader& header, std::span<const std::byte> payload) {
  header.payload_size = payload.size();
  header.payload_hash = header.hashed ? xxh3_64(payload) : 0;
}

std::array<std::byte, kFrameHeaderSize> encode_header(const FrameHeader& h) {
  std::array<std::byte, kFrameHeaderSize> out{};
  ByteWriter w(out);
  w.put<std::uint32_t>(kFrameMagic);
  w.put<std::uint8_t>(kFrameVersion);
  w.put<std::uint8_t>(static_cast<std::uint8_t>(h.type));
  w.put<std::uint16_t>(h.hashed ? 0 : kUnhashedFlag);
  w.put<std::uint64_t>(h.job);
  w.put<std::uint64_t>(h.round);
  w.put<std::uint32_t>(h.attempt);
  w.put<std::uint32_t>(h.chunk);
  w.put<std::uint64_t>(h.payload_size);
  w.put<std::uint64_t>(h.payload_hash);
  return out;
}

Result<FrameHeader> decode_header(std::span<const std::byte, kFrameHeaderSize> bytes, const FrameLimits& limits) {
  ByteReader r(bytes);
  const auto magic = r.get<std::uint32_t>();
  const auto version = r.get<std::uint8_t>();
  const auto type = r.get<std::uint8_t>();
  const auto flags = r.get<std::uint16_t>();
  FrameHeader h;
  h.job = r.get<std::uint64_t>();
  h.round = r.get<std::uint64_t>();
  h.attempt = r.get<std::uint32_t>();
  h.chunk = r.get<std::uint32_t>();
  h.payload_size = r.get<std::uint64_t>();
  h.payload_hash = r.get<std::uint64_t>();
  GEOLOCO_RETURN_IF(magic != kFrameMagic, Err::malformed,
                    "bad frame magic: not a geoloco peer, or the stream is out of step");
  GEOLOCO_RETURN_IF(version != kFrameVersion, Err::unsupported, "frame version ", int(version),
                    " is not supported (this build speaks version ", int(kFrameVersion), ")");
  GEOLOCO_RETURN_IF(type < 1 || type > 9, Err::malformed, "unknown frame type ", int(type));
  GEOLOCO_RETURN_IF((flags & ~kUnhashedFlag) != 0, Err::malformed, "frame header reserved bits are set");
  h.type = static_cast<FrameType>(type);
  h.hashed = (flags & kUnhashedFlag) == 0;
  GEOLOCO_RETURN_IF(!h.hashed && !may_skip_hash(h.type), Err::malformed, "a ", frame_type_name(h.type),
                    " frame without its payload hash (only shard and gather frames may skip it)");
  GEOLOCO_RETURN_IF(!h.hashed && h.payload_hash != 0, Err::malformed, "an unhashed ", frame_type_name(h.type),
                    " frame with a hash");
  GEOLOCO_RETURN_IF(h.payload_size > limits.max_payload_bytes, Err::too_large, "frame payload of ", h.payload_size,
                    " bytes exceeds the bound of ", limits.max_payload_bytes, " bytes");
  const bool empty_kind = h.type == FrameType::keepalive || h.type == FrameType::redial || h.type == FrameType::goodbye;
  GEOLOCO_RETURN_IF(empty_kind && h.payload_size != 0, Err::malformed, frame_type_name(h.type),
                    " frame with a payload");
  return h;
}

Status verify_payload(const FrameHeader& h, std::span<const std::byte> payload) {
  GEOLOCO_RETURN_IF(payload.size() != h.payload_size, Err::truncated, "frame payload of ", payload.size(),
                    " bytes, header says ", h.payload_size);
  GEOLOCO_RETURN_IF(h.hashed && xxh3_64(payload) != h.payload_hash, Err::malformed, "frame checksum mismatch (",
                    frame_type_name(h.type), " round ", h.round, " chunk ", h.chunk, "): the payload was corrupted");
  return {};
}

}  // namespace geoloco::transport
