// The frame: the unit of everything sites say to each other (docs/design.md §3).
//
//   offset size field
//   0      4    magic "GLF1"
//   4      1    version (1)
//   5      1    type (FrameType)
//   6      2    flags: bit 0 = the payload carries no hash (below); the others 0
//   8      8    job id
//   16     8    round
//   24     4    attempt (the plan's; a hello's: the sender's connections_per_peer)
//   28     4    chunk index
//   32     8    payload length (bounded by FrameLimits before anything is allocated)
//   40     8    xxh3-64 of the payload (0 when unhashed)
//   48          payload
//
// All integers little-endian. A header is checked on its own (decode_header)
// before the payload is read; the payload is checked against the hash once read.
//
// Unhashed frames: only shard and gather frames, and only on TLS
// connections, where each record's AEAD tag already proves the bytes
// arrived as sent. Their payloads are buffers the all-reduce encoded and
// owns until written, so no hash is needed to catch a payload that changed
// while it was sent; state frames, read from a model that may move, keep it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"

namespace geoloco::transport {

inline constexpr std::uint32_t kFrameMagic = 0x31464c47u;  // "GLF1" on the wire
inline constexpr std::uint8_t kFrameVersion = 1;
inline constexpr std::size_t kFrameHeaderSize = 48;
/// Flag bit 0 of header bytes 6-7: the payload carries no hash.
inline constexpr std::uint16_t kUnhashedFlag = 1;
/// A hello's payload is a site name: at most 64 bytes (common/site_name.h).
inline constexpr std::uint64_t kMaxHelloBytes = 64;

enum class FrameType : std::uint8_t {
  hello = 1,      ///< first frame on a connection: payload = the sender's site name
  shard = 2,      ///< all-reduce phase 1: a chunk of the receiver's shard of the sender's input
  gather = 3,     ///< all-reduce phase 2: a chunk of the sender's averaged shard
  keepalive = 4,  ///< no payload; proves the peer alive on an idle connection
  control = 5,    ///< control plane (coordinator messages); payload defined by the daemon
  state = 6,      ///< STATE_SYNC: a chunk of a job's outer state (binary), sent to a (re)joining site
  /// No payload, on the control connection, to the dialing side: "open new
  /// connections to me and retire these" (this site has a new certificate).
  redial = 7,
  /// No payload: the last frame its sender sends on this connection; the
  /// sender's frames of this slot go on over the connection that replaced it.
  goodbye = 8,
  /// The first and only frame on a connection from the site that accepts to
  /// the one that dials it: payload = the sender's site name. "Dial me now":
  /// the sender just started (or lost its connections), and the dialer,
  /// which may be waiting out a long backoff, dials at once.
  knock = 9,
};

std::string_view frame_type_name(FrameType type);

struct FrameHeader {
  FrameType type = FrameType::keepalive;
  std::uint64_t job = 0;
  std::uint64_t round = 0;
  /// shard and gather frames: the plan's attempt of the round (every
  /// epoch's attempts fit 32 bits); 0 in the others, except a hello, whose
  /// four bytes here are its own field (hello_connections()).
  std::uint32_t attempt = 0;
  std::uint32_t chunk = 0;
  std::uint64_t payload_size = 0;
  std::uint64_t payload_hash = 0;
  /// False: the payload carries no hash (flag bit 0 on the wire); see above.
  bool hashed = true;
};

/// Whether a frame of this type may travel unhashed (on a TLS connection).
bool may_skip_hash(FrameType type);

/// A hello's connections_per_peer, carried where other frames carry the attempt.
inline std::uint32_t hello_connections(const FrameHeader& h) { return h.attempt; }
inline void set_hello_connections(FrameHeader& h, std::uint32_t connections) { h.attempt = connections; }

struct FrameLimits {
  /// Largest payload accepted, in bytes; 64 MiB holds a 4 MiB chunk many times over.
  std::uint64_t max_payload_bytes = 64ull << 20;
  bool operator==(const FrameLimits&) const = default;
};

/// Fills payload_size and, when `header.hashed`, payload_hash from `payload` (else 0).
void seal(FrameHeader& header, std::span<const std::byte> payload);

/// Writes the 48 header bytes.
std::array<std::byte, kFrameHeaderSize> encode_header(const FrameHeader& header);

/// Parses and checks a header: magic, version, known type, no unknown flag,
/// no hash skipped where may_skip_hash() forbids it (and a hash of 0 when
/// skipped), payload length within `limits`. Errors: malformed (magic, type,
/// flags), unsupported (version), too_large (length).
Result<FrameHeader> decode_header(std::span<const std::byte, kFrameHeaderSize> bytes, const FrameLimits& limits);

/// Checks the payload against the header's length and (when hashed) hash.
/// Errors: truncated (length), malformed ("checksum mismatch").
Status verify_payload(const FrameHeader& header, std::span<const std::byte> payload);

}  // namespace geoloco::transport
