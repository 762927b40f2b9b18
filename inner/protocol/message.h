// The wire format of the local sync protocol (docs/design.md §3): what a trainer and
// its site's daemon say to each other over the job's Unix socket. Parameters
// never travel here; they lie in the shared-memory segment (shared_segment.h)
// whose descriptor rides on WELCOME. This file encodes and decodes bytes and
// nothing else: no sockets, no state, so the sanitizer build and the fuzzer
// can exercise it alone.
//
// Every message is a 12-byte header and a body:
//
//   offset size field
//   0      4    magic "GLS1"
//   4      1    version (1)
//   5      1    type (MessageType)
//   6      2    reserved, 0
//   8      4    body length in bytes (bounded by WireLimits before allocating)
//   12          body
//
// Bodies (all integers little-endian, strings are u16 length + bytes):
//   HELLO   trainer→daemon  job:str, u32 tensor count, then per tensor:
//                           name:str, u8 dtype (1 = fp32), u8 rank,
//                           rank × u64 dims, u64 offset (in values of the flat
//                           fp32 buffer)
//   WELCOME daemon→trainer  u32 flags (bit 0: the segment holds the anchor;
//                           bit 1: the job's phase plan follows the table),
//                           u64 values in the segment, u32 fragment count, then
//                           per fragment: u64 offset, u64 length (values),
//                           u64 next round; then with bit 1: u64 H (steps per
//                           phase, 0: time-based), f64 seconds per phase, u64
//                           min steps, u64 overlap τ, f64 α, u32 merge (0
//                           replace, 1 delayed), u32 reserved 0, u64 first
//                           round, u64 stop rounds (0: none). The memfd rides
//                           on this message (SCM_RIGHTS).
//   INIT    trainer→daemon  empty: "my initial parameters are in the segment"
//   SYNC    trainer→daemon  u64 round, u32 fragment, u32 flags, u64 tokens,
//                           f64 loss, and when flags bit 0 is set: f64 compute
//                           seconds, f64 loop seconds (the trainer's time since
//                           its previous SYNC: in inner steps, and in all but
//                           evaluations): "my replica of the fragment is in
//                           the segment"
//   RESULT  daemon→trainer  u64 round, u32 fragment (0xffffffff: all), u32 flags
//                           (bit 0: stop), u64 next round: "the new anchor of
//                           the fragment is in the segment"
//   ERROR   daemon→trainer  u8 code (geoloco::Err), u8 flags (bit 0: fatal, the
//                           daemon closes the connection), u8 refused type
//                           (0: none), u8 reserved 0, u32 fragment, u64 round,
//                           reason:str
//
// The header and the ERROR body never change across versions, so a daemon can
// always tell a trainer of another version why it is refused.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/layout.h"
#include "common/status.h"

namespace geoloco::inner::protocol {

inline constexpr std::uint32_t kMagic = 0x31534c47u;  // "GLS1" on the wire
inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kHeaderSize = 12;
/// RESULT's fragment when the whole segment holds the anchor (answer to INIT).
inline constexpr std::uint32_t kAllFragments = 0xffffffffu;
/// ERROR's fragment/round when the refusal is about no fragment or round.
inline constexpr std::uint32_t kNoFragment = 0xffffffffu;
inline constexpr std::size_t kMaxNameBytes = 1024;
inline constexpr std::size_t kMaxRank = 8;
inline constexpr std::size_t kMaxReasonBytes = 4096;

enum class MessageType : std::uint8_t {
  hello = 1,
  welcome = 2,
  init = 3,
  sync = 4,
  result = 5,
  error = 6,
};

/// "HELLO", "SYNC", ...; "type N" for a value that is not a type.
std::string_view message_type_name(MessageType type);

enum class DType : std::uint8_t { f32 = 1 };  ///< a tensor's element type on the wire

/// Bounds checked before anything is allocated.
struct WireLimits {
  /// Largest body accepted; 16 MiB holds a layout of ~100k tensors.
  std::uint32_t max_body_bytes = 16u << 20;
};

struct Header {
  MessageType type = MessageType::init;
  std::uint32_t body_size = 0;
};

/// The layout HELLO carries is common/layout.h's (TensorDesc, Layout): one
/// type for the trainer, the protocol, the outer state and the checkpoint.
/// On the wire each tensor also carries a dtype byte, always DType::f32.

/// One fragment of the segment: values [offset, offset + length); the trainer's
/// next SYNC of it must carry `next_round`.
struct FragmentDesc {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t next_round = 0;
  bool operator==(const FragmentDesc&) const = default;
};

struct HelloMsg {
  std::string job;
  Layout layout;
  bool operator==(const HelloMsg&) const = default;
};

/// How the job's inner phases run, as the job file says: what a trainer
/// that is not started with these as arguments (a PyTorch loop through the
/// Python client) learns from its WELCOME.
struct PhasePlan {
  std::uint64_t sync_every = 0;     ///< H, inner steps per phase; 0: time-based
  double sync_seconds = 0;          ///< seconds per phase when time-based, else 0
  std::uint64_t min_steps = 1;      ///< time-based: at least this many steps
  std::uint64_t overlap_steps = 0;  ///< Streaming DiLoCo's τ
  double alpha = 0;                 ///< the merge's local weight α
  bool merge_delayed = false;       ///< the delayed outer step's merge
  std::uint64_t first_round = 1;    ///< the number of the job's first round
  std::uint64_t stop_rounds = 0;    ///< the job file's stop.rounds, periods of H steps (0: none)
  bool operator==(const PhasePlan&) const = default;
  /// Errors: invalid_argument naming the rule (exactly one of H and seconds,
  /// finite seconds, α in [0, 1], no α with the delayed merge, min steps ≥ 1).
  Status check() const;
};

inline constexpr std::uint32_t kWelcomeAnchorReady = 1;
inline constexpr std::uint32_t kWelcomePlan = 2;
struct WelcomeMsg {
  std::uint32_t flags = 0;  ///< kWelcomeAnchorReady; kWelcomePlan is set by the encoder from `plan`
  std::uint64_t values = 0;
  std::vector<FragmentDesc> fragments;
  std::optional<PhasePlan> plan = std::nullopt;  ///< the job's phase plan, when the daemon sends it
  bool anchor_ready() const { return (flags & kWelcomeAnchorReady) != 0; }
  bool operator==(const WelcomeMsg&) const = default;
};

struct InitMsg {
  bool operator==(const InitMsg&) const = default;
};

/// What a trainer measured of its own time since its previous SYNC: the
/// seconds its loop spent in inner steps, and the loop's seconds without
/// evaluations. compute / loop is the site's compute share (geoloco watch).
struct SyncTiming {
  double compute_seconds = 0;
  double loop_seconds = 0;
  bool operator==(const SyncTiming&) const = default;
};

inline constexpr std::uint32_t kSyncTimed = 1;  ///< SYNC's flags: a SyncTiming follows the loss
struct SyncMsg {
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;
  std::uint64_t tokens = 0;
  double loss = 0;
  std::optional<SyncTiming> timing = std::nullopt;  ///< absent: the trainer does not measure it
  bool operator==(const SyncMsg&) const = default;
};

inline constexpr std::uint32_t kResultStop = 1;
struct ResultMsg {
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;
  std::uint32_t flags = 0;
  std::uint64_t next_round = 0;
  bool stop() const { return (flags & kResultStop) != 0; }
  bool operator==(const ResultMsg&) const = default;
};

inline constexpr std::uint8_t kErrorFatal = 1;
struct ErrorMsg {
  Err code = Err::internal;
  bool fatal = false;
  std::uint8_t refused = 0;  ///< MessageType of the refused message, 0 if none
  std::uint32_t fragment = kNoFragment;
  std::uint64_t round = 0;
  std::string reason;
  bool operator==(const ErrorMsg&) const = default;
};

using Message = std::variant<HelloMsg, WelcomeMsg, InitMsg, SyncMsg, ResultMsg, ErrorMsg>;

/// The type a message travels as.
MessageType type_of(const Message& message);

/// Header and body of one message. Errors: invalid_argument (a string or list
/// longer than the format allows, a rank over kMaxRank); ERROR reasons longer
/// than kMaxReasonBytes are cut instead, so a refusal can always be sent.
Result<std::vector<std::byte>> encode(const Message& message);

/// Parses and checks a header: magic, version, reserved bits, known type, body
/// length within `limits`. Errors: malformed (magic, reserved, type),
/// unsupported (version), too_large (length).
Result<Header> decode_header(std::span<const std::byte, kHeaderSize> bytes, const WireLimits& limits);

/// Parses a body of the given type. Every field is bounds-checked and the body
/// must be consumed exactly. Errors: truncated (the body ends inside a field,
/// or announces more tensors or fragments than its bytes can hold), malformed
/// (trailing bytes, unknown dtype or flags, rank over kMaxRank, a name longer
/// than kMaxNameBytes, non-zero reserved fields).
Result<Message> decode_body(MessageType type, std::span<const std::byte> body);

/// Accumulates a byte stream and cuts it into messages. A bad header poisons
/// the stream (its length cannot be trusted), so it is reported once and
/// every later call reports it again.
class MessageBuffer {
 public:
  explicit MessageBuffer(WireLimits limits = {}) : limits_(limits) {}

  void append(std::span<const std::byte> bytes);

  struct Raw {
    Header header;
    std::vector<std::byte> body;
  };
  /// The next complete message, or nullopt when more bytes are needed.
  /// Errors: those of decode_header.
  Result<std::optional<Raw>> next();

  /// Bytes held that do not yet form a whole message.
  std::size_t pending() const { return bytes_.size() - start_; }

 private:
  WireLimits limits_;
  std::vector<std::byte> bytes_;
  std::size_t start_ = 0;
  Status poisoned_;
};

}  // namespace geoloco::inner::protocol
