// Encoding and decoding of the local sync protocol's messages (message.h).
#include "inner/protocol/message.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/byte_io.h"

namespace geoloco::inner::protocol {
namespace {

// Smallest encoded tensor: empty name (2), dtype (1), rank 0 (1), offset (8).
constexpr std::size_t kMinTensorBytes = 12;
constexpr std::size_t kFragmentBytes = 24;
constexpr std::size_t kPlanBytes = 64;

std::size_t str_size(const std::string& s) { return 2 + s.size(); }

void put_str(ByteWriter& w, std::string_view s) {
  w.put(static_cast<std::uint16_t>(s.size()));
  w.put_bytes(std::as_bytes(std::span(s.data(), s.size())));
}

// Reads a u16-prefixed string; `what` names the field in errors.
Status get_str(ByteReader& r, std::string& out, std::size_t max_bytes, const char* what) {
  auto n = r.get<std::uint16_t>();
  GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "body ends inside the length of ", what);
  GEOLOCO_RETURN_IF(n > max_bytes, Err::malformed, what, " is ", n, " bytes; at most ", max_bytes, " are allowed");
  auto bytes = r.get_bytes(n);
  GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "body ends inside ", what, " (", n, " bytes announced, ", r.remaining(),
                    " left)");
  out.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return {};
}

struct BodySize {
  std::size_t operator()(const HelloMsg& m) const {
    std::size_t n = str_size(m.job) + 4;
    for (const auto& t : m.layout) n += str_size(t.name) + 2 + 8 * t.shape.size() + 8;
    return n;
  }
  std::size_t operator()(const WelcomeMsg& m) const {
    return 4 + 8 + 4 + kFragmentBytes * m.fragments.size() + (m.plan ? kPlanBytes : 0);
  }
  std::size_t operator()(const InitMsg&) const { return 0; }
  std::size_t operator()(const SyncMsg& m) const { return m.timing ? 48 : 32; }
  std::size_t operator()(const ResultMsg&) const { return 24; }
  std::size_t operator()(const ErrorMsg& m) const { return 16 + 2 + std::min(m.reason.size(), kMaxReasonBytes); }
};

struct BodyWriter {
  ByteWriter& w;
  void operator()(const HelloMsg& m) const {
    put_str(w, m.job);
    w.put(static_cast<std::uint32_t>(m.layout.size()));
    for (const auto& t : m.layout) {
      put_str(w, t.name);
      w.put(static_cast<std::uint8_t>(DType::f32));
      w.put(static_cast<std::uint8_t>(t.shape.size()));
      for (auto d : t.shape) w.put(d);
      w.put(t.offset);
    }
  }
  void operator()(const WelcomeMsg& m) const {
    w.put((m.flags & kWelcomeAnchorReady) | (m.plan ? kWelcomePlan : 0u));
    w.put(m.values);
    w.put(static_cast<std::uint32_t>(m.fragments.size()));
    for (const auto& f : m.fragments) {
      w.put(f.offset);
      w.put(f.length);
      w.put(f.next_round);
    }
    if (const auto& p = m.plan) {
      w.put(p->sync_every);
      w.put(p->sync_seconds);
      w.put(p->min_steps);
      w.put(p->overlap_steps);
      w.put(p->alpha);
      w.put(std::uint32_t{p->merge_delayed ? 1u : 0u});
      w.put(std::uint32_t{0});
      w.put(p->first_round);
      w.put(p->stop_rounds);
    }
  }
  void operator()(const InitMsg&) const {}
  void operator()(const SyncMsg& m) const {
    w.put(m.round);
    w.put(m.fragment);
    w.put(m.timing ? kSyncTimed : std::uint32_t{0});
    w.put(m.tokens);
    w.put(m.loss);
    if (m.timing) {
      w.put(m.timing->compute_seconds);
      w.put(m.timing->loop_seconds);
    }
  }
  void operator()(const ResultMsg& m) const {
    w.put(m.round);
    w.put(m.fragment);
    w.put(m.flags);
    w.put(m.next_round);
  }
  void operator()(const ErrorMsg& m) const {
    w.put(static_cast<std::uint8_t>(m.code));
    w.put(static_cast<std::uint8_t>(m.fatal ? kErrorFatal : 0));
    w.put(m.refused);
    w.put(std::uint8_t{0});
    w.put(m.fragment);
    w.put(m.round);
    put_str(w, std::string_view(m.reason).substr(0, kMaxReasonBytes));
  }
};

Status check_encodable(const Message& message) {
  if (const auto* h = std::get_if<HelloMsg>(&message)) {
    GEOLOCO_RETURN_IF(h->job.size() > kMaxNameBytes, Err::invalid_argument, "job name is ", h->job.size(),
                      " bytes; at most ", kMaxNameBytes, " are allowed");
    GEOLOCO_RETURN_IF(h->layout.size() > std::numeric_limits<std::uint32_t>::max(), Err::invalid_argument,
                      "too many tensors");
    for (const auto& t : h->layout) {
      GEOLOCO_RETURN_IF(t.name.size() > kMaxNameBytes, Err::invalid_argument, "tensor name '", t.name.substr(0, 40),
                        "...' is ", t.name.size(), " bytes; at most ", kMaxNameBytes, " are allowed");
      GEOLOCO_RETURN_IF(t.shape.size() > kMaxRank, Err::invalid_argument, "tensor '", t.name, "' has rank ",
                        t.shape.size(), "; at most ", kMaxRank, " is allowed");
    }
  }
  if (const auto* w = std::get_if<WelcomeMsg>(&message)) {
    GEOLOCO_RETURN_IF(w->fragments.size() > std::numeric_limits<std::uint32_t>::max(), Err::invalid_argument,
                      "too many fragments");
    GEOLOCO_RETURN_IF((w->flags & ~kWelcomeAnchorReady) != 0, Err::invalid_argument, "WELCOME's flags ", w->flags,
                      ": only the anchor flag is set by hand (the plan flag follows `plan`)");
    if (w->plan) GEOLOCO_TRY(w->plan->check());
  }
  return {};
}

Result<Message> decode_hello(ByteReader& r) {
  HelloMsg m;
  GEOLOCO_TRY(get_str(r, m.job, kMaxNameBytes, "the job name"));
  auto count = r.get<std::uint32_t>();
  GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "HELLO ends before its tensor count");
  // Refuse a count the remaining bytes cannot hold before reserving for it.
  GEOLOCO_RETURN_IF(count > r.remaining() / kMinTensorBytes, Err::truncated, "HELLO announces ", count,
                    " tensors but only ", r.remaining(), " bytes follow");
  m.layout.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    TensorDesc t;
    GEOLOCO_TRY(get_str(r, t.name, kMaxNameBytes, "a tensor name"));
    auto dtype = r.get<std::uint8_t>();
    auto rank = r.get<std::uint8_t>();
    GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "HELLO ends inside tensor ", i, " ('", t.name, "')");
    GEOLOCO_RETURN_IF(dtype != static_cast<std::uint8_t>(DType::f32), Err::malformed, "tensor '", t.name,
                      "' has dtype ", int(dtype), "; only 1 (fp32) is known");
    GEOLOCO_RETURN_IF(rank > kMaxRank, Err::malformed, "tensor '", t.name, "' has rank ", int(rank), "; at most ",
                      kMaxRank, " is allowed");
    t.shape.resize(rank);
    for (auto& d : t.shape) d = r.get<std::uint64_t>();
    t.offset = r.get<std::uint64_t>();
    GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "HELLO ends inside tensor ", i, " ('", t.name, "')");
    m.layout.push_back(std::move(t));
  }
  return Message(std::move(m));
}

Result<Message> decode_welcome(ByteReader& r) {
  WelcomeMsg m;
  m.flags = r.get<std::uint32_t>();
  m.values = r.get<std::uint64_t>();
  auto count = r.get<std::uint32_t>();
  GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "WELCOME body is shorter than its 16 fixed bytes");
  GEOLOCO_RETURN_IF((m.flags & ~(kWelcomeAnchorReady | kWelcomePlan)) != 0, Err::malformed,
                    "WELCOME has unknown flags ", m.flags);
  GEOLOCO_RETURN_IF(count > r.remaining() / kFragmentBytes, Err::truncated, "WELCOME announces ", count,
                    " fragments but only ", r.remaining(), " bytes follow");
  m.fragments.resize(count);
  for (auto& f : m.fragments) {
    f.offset = r.get<std::uint64_t>();
    f.length = r.get<std::uint64_t>();
    f.next_round = r.get<std::uint64_t>();
  }
  GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "WELCOME ends inside its fragment table");
  if ((m.flags & kWelcomePlan) != 0) {
    PhasePlan p;
    p.sync_every = r.get<std::uint64_t>();
    p.sync_seconds = r.get<double>();
    p.min_steps = r.get<std::uint64_t>();
    p.overlap_steps = r.get<std::uint64_t>();
    p.alpha = r.get<double>();
    const auto merge = r.get<std::uint32_t>();
    const auto reserved = r.get<std::uint32_t>();
    p.first_round = r.get<std::uint64_t>();
    p.stop_rounds = r.get<std::uint64_t>();
    GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "WELCOME ends inside its phase plan");
    GEOLOCO_RETURN_IF(merge > 1 || reserved != 0, Err::malformed, "WELCOME's phase plan has merge ", merge,
                      " (0 or 1) and reserved ", reserved, " (0)");
    p.merge_delayed = merge == 1;
    Status ok = p.check();
    GEOLOCO_RETURN_IF(!ok.ok(), Err::malformed, "WELCOME's phase plan: ", ok.message());
    m.plan = p;
    m.flags &= ~kWelcomePlan;  // carried by `plan` from here on
  }
  return Message(std::move(m));
}

Result<Message> decode_sync(ByteReader& r) {
  SyncMsg m;
  m.round = r.get<std::uint64_t>();
  m.fragment = r.get<std::uint32_t>();
  auto flags = r.get<std::uint32_t>();
  m.tokens = r.get<std::uint64_t>();
  m.loss = r.get<double>();
  GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "SYNC body is shorter than its 32 bytes");
  GEOLOCO_RETURN_IF((flags & ~kSyncTimed) != 0, Err::malformed, "SYNC has unknown flags ", flags);
  if ((flags & kSyncTimed) != 0) {
    SyncTiming t;
    t.compute_seconds = r.get<double>();
    t.loop_seconds = r.get<double>();
    GEOLOCO_RETURN_IF(r.failed(), Err::truncated,
                      "SYNC says its timing follows, but its body is shorter than 48 bytes");
    // Refused here, so nothing downstream divides by or shows a nonsense figure.
    GEOLOCO_RETURN_IF(!(t.compute_seconds >= 0) || !(t.loop_seconds >= 0) || !std::isfinite(t.compute_seconds) ||
                          !std::isfinite(t.loop_seconds),
                      Err::malformed, "SYNC's timing is not two finite non-negative seconds (compute ",
                      t.compute_seconds, ", loop ", t.loop_seconds, ")");
    m.timing = t;
  }
  return Message(m);
}

Result<Message> decode_result(ByteReader& r) {
  ResultMsg m;
  m.round = r.get<std::uint64_t>();
  m.fragment = r.get<std::uint32_t>();
  m.flags = r.get<std::uint32_t>();
  m.next_round = r.get<std::uint64_t>();
  GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "RESULT body is shorter than its 24 bytes");
  GEOLOCO_RETURN_IF((m.flags & ~kResultStop) != 0, Err::malformed, "RESULT has unknown flags ", m.flags);
  return Message(m);
}

Result<Message> decode_error(ByteReader& r) {
  ErrorMsg m;
  auto code = r.get<std::uint8_t>();
  auto flags = r.get<std::uint8_t>();
  m.refused = r.get<std::uint8_t>();
  auto reserved = r.get<std::uint8_t>();
  m.fragment = r.get<std::uint32_t>();
  m.round = r.get<std::uint64_t>();
  GEOLOCO_RETURN_IF(r.failed(), Err::truncated, "ERROR body is shorter than its 16 fixed bytes");
  GEOLOCO_RETURN_IF(reserved != 0 || (flags & ~kErrorFatal) != 0, Err::malformed,
                    "ERROR has unknown flags or a non-zero reserved byte");
  // An unknown code from a newer daemon is kept readable as "internal".
  m.code = code <= static_cast<std::uint8_t>(Err::internal) && code != 0 ? static_cast<Err>(code) : Err::internal;
  m.fatal = (flags & kErrorFatal) != 0;
  GEOLOCO_TRY(get_str(r, m.reason, kMaxReasonBytes, "the reason"));
  return Message(std::move(m));
}

}  // namespace

Status PhasePlan::check() const {
  GEOLOCO_RETURN_IF(!std::isfinite(sync_seconds) || sync_seconds < 0, Err::invalid_argument, "the seconds per phase (",
                    sync_seconds, ") must be finite and not negative");
  GEOLOCO_RETURN_IF((sync_every > 0) == (sync_seconds > 0), Err::invalid_argument,
                    "a phase is H steps or a number of seconds: exactly one must be set (H ", sync_every, ", seconds ",
                    sync_seconds, ")");
  GEOLOCO_RETURN_IF(min_steps == 0, Err::invalid_argument, "min steps must be at least 1");
  GEOLOCO_RETURN_IF(!(alpha >= 0 && alpha <= 1), Err::invalid_argument, "alpha ", alpha, " is outside [0, 1]");
  GEOLOCO_RETURN_IF(merge_delayed && alpha > 0, Err::invalid_argument,
                    "the delayed merge keeps the local progress; it takes no alpha");
  return {};
}

std::string_view message_type_name(MessageType type) {
  switch (type) {
    case MessageType::hello:
      return "HELLO";
    case MessageType::welcome:
      return "WELCOME";
    case MessageType::init:
      return "INIT";
    case MessageType::sync:
      return "SYNC";
    case MessageType::result:
      return "RESULT";
    case MessageType::error:
      return "ERROR";
  }
  return "unknown type";
}

MessageType type_of(const Message& message) {
  static constexpr MessageType kTypes[] = {MessageType::hello, MessageType::welcome, MessageType::init,
                                           MessageType::sync,  MessageType::result,  MessageType::error};
  return kTypes[message.index()];
}

Result<std::vector<std::byte>> encode(const Message& message) {
  GEOLOCO_TRY(check_encodable(message));
  std::size_t body = std::visit(BodySize{}, message);
  GEOLOCO_RETURN_IF(body > std::numeric_limits<std::uint32_t>::max(), Err::invalid_argument, "a ",
                    message_type_name(type_of(message)), " body of ", body, " bytes does not fit the header");
  std::vector<std::byte> out(kHeaderSize + body);
  ByteWriter w(out);
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<std::uint8_t>(type_of(message)));
  w.put(std::uint16_t{0});
  w.put(static_cast<std::uint32_t>(body));
  std::visit(BodyWriter{w}, message);
  GEOLOCO_RETURN_IF(w.failed() || w.size() != out.size(), Err::internal, "encoded ", w.size(), " bytes of ", out.size(),
                    " for ", message_type_name(type_of(message)));
  return out;
}

Result<Header> decode_header(std::span<const std::byte, kHeaderSize> bytes, const WireLimits& limits) {
  ByteReader r(bytes);
  auto magic = r.get<std::uint32_t>();
  auto version = r.get<std::uint8_t>();
  auto type = r.get<std::uint8_t>();
  auto reserved = r.get<std::uint16_t>();
  auto body = r.get<std::uint32_t>();
  GEOLOCO_RETURN_IF(magic != kMagic, Err::malformed, "bad message magic 0x", std::hex, magic,
                    ": this is not a geoloco local sync message (\"GLS1\")");
  // The version is checked before anything whose meaning a later version may change.
  GEOLOCO_RETURN_IF(version != kVersion, Err::unsupported, "protocol version ", int(version),
                    " is not supported; this side speaks version ", int(kVersion));
  GEOLOCO_RETURN_IF(reserved != 0, Err::malformed, "reserved header bits are 0x", std::hex, reserved, ", not 0");
  GEOLOCO_RETURN_IF(
      type < static_cast<std::uint8_t>(MessageType::hello) || type > static_cast<std::uint8_t>(MessageType::error),
      Err::malformed, "unknown message type ", int(type));
  GEOLOCO_RETURN_IF(body > limits.max_body_bytes, Err::too_large, message_type_name(MessageType(type)), " body of ",
                    body, " bytes is over the limit of ", limits.max_body_bytes);
  return Header{static_cast<MessageType>(type), body};
}

Result<Message> decode_body(MessageType type, std::span<const std::byte> body) {
  ByteReader r(body);
  Result<Message> m = Status(Err::malformed, "unknown message type");
  switch (type) {
    case MessageType::hello:
      m = decode_hello(r);
      break;
    case MessageType::welcome:
      m = decode_welcome(r);
      break;
    case MessageType::init:
      m = Message(InitMsg{});
      break;
    case MessageType::sync:
      m = decode_sync(r);
      break;
    case MessageType::result:
      m = decode_result(r);
      break;
    case MessageType::error:
      m = decode_error(r);
      break;
  }
  if (!m.ok()) {
    return Status(m.status().code(), cat(message_type_name(type), ": ", m.status().message()));
  }
  GEOLOCO_RETURN_IF(r.remaining() != 0, Err::malformed, message_type_name(type), " has ", r.remaining(),
                    " bytes after its last field");
  return m;
}

void MessageBuffer::append(std::span<const std::byte> bytes) {
  // Drop consumed bytes once they dominate, so the buffer stays about one message long.
  if (start_ > 0 && start_ >= bytes_.size() / 2) {
    bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(start_));
    start_ = 0;
  }
  bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
}

Result<std::optional<MessageBuffer::Raw>> MessageBuffer::next() {
  if (!poisoned_.ok()) return poisoned_;
  if (pending() < kHeaderSize) return std::optional<Raw>();
  auto head = std::span<const std::byte>(bytes_).subspan(start_).first<kHeaderSize>();
  auto header = decode_header(head, limits_);
  if (!header.ok()) {
    poisoned_ = header.status();
    return poisoned_;
  }
  if (pending() - kHeaderSize < header->body_size) return std::optional<Raw>();
  Raw raw;
  raw.header = *header;
  auto from = bytes_.begin() + static_cast<std::ptrdiff_t>(start_ + kHeaderSize);
  raw.body.assign(from, from + header->body_size);
  start_ += kHeaderSize + header->body_size;
  return std::optional<Raw>(std::move(raw));
}

}  // namespace geoloco::inner::protocol
