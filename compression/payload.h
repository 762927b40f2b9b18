// The self-describing header in front of every encoded chunk.
//
//   offset size field
//   0      4    magic "GLCP"
//   4      1    version (1)
//   5      1    stage count (0..3; 0 is raw fp32)
//   6      2    descriptor size D
//   8      8    element count n (dense floats in this chunk)
//   16     8    raw body size (bytes before the byte codec; = body size without one)
//   24     8    body size (bytes after the header)
//   32     D    stage descriptors: per stage u8 codec id, u8 parameter size, parameters
//   32+D        body
//
// All integers little-endian. The body before the byte codec is
//   [u32 index section size][index section]   only with a sparsifier
//   [value section]                           value codec output, or raw fp32
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/status.h"

namespace geoloco::compression {

inline constexpr std::uint32_t kPayloadMagic = 0x50434c47u;  // "GLCP" on the wire
inline constexpr std::uint8_t kPayloadVersion = 1;
inline constexpr std::size_t kPayloadFixedHeaderSize = 32;

struct PayloadHeader {
  std::uint8_t stage_count = 0;
  std::uint64_t element_count = 0;
  std::uint64_t raw_body_size = 0;
  std::uint64_t body_size = 0;
  std::span<const std::byte> descriptor;  ///< view into the payload
  std::span<const std::byte> body;        ///< view into the payload

  std::size_t header_size() const { return kPayloadFixedHeaderSize + descriptor.size(); }
};

/// Parses and checks the fixed header against the payload's length.
/// Errors: truncated (shorter than the header says), malformed (bad magic,
/// bad counts, trailing bytes), unsupported (another version).
Result<PayloadHeader> parse_payload_header(std::span<const std::byte> payload);

/// Writes the fixed header and the descriptor into out (header_size bytes).
void write_payload_header(const PayloadHeader& header, std::span<std::byte> out);

}  // namespace geoloco::compression
