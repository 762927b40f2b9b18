// Frame headers: round trip, and every way a header can be refused. Also
// replays the fuzz corpus (tests/corpus) under the sanitizer build.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "transport/frame.h"

using namespace geoloco;
using namespace geoloco::transport;

namespace {
std::array<std::byte, kFrameHeaderSize> sample(std::span<const std::byte> payload) {
  FrameHeader h;
  h.type = FrameType::shard;
  h.job = 77;
  h.round = 12;
  h.attempt = 3;
  h.chunk = 9;
  seal(h, payload);
  return encode_header(h);
}
}  // namespace

TEST_CASE("a frame header round-trips every field", "[sanitize]") {
  std::vector<std::byte> payload(1000, std::byte{7});
  auto bytes = sample(payload);
  auto h = decode_header(bytes, FrameLimits{});
  REQUIRE(h.ok());
  CHECK(h->type == FrameType::shard);
  CHECK(h->job == 77);
  CHECK(h->round == 12);
  CHECK(h->attempt == 3);
  CHECK(h->chunk == 9);
  CHECK(h->payload_size == 1000);
  CHECK(verify_payload(*h, payload).ok());
  CHECK(static_cast<char>(bytes[0]) == 'G');  // magic "GLF1" on the wire
  CHECK(static_cast<char>(bytes[3]) == '1');
}

TEST_CASE("each bad header is refused with its own message", "[sanitize]") {
  std::vector<std::byte> payload(64, std::byte{1});
  auto patched = [&](std::size_t at, std::uint64_t value, std::size_t width) {
    auto b = sample(payload);
    std::memcpy(b.data() + at, &value, width);
    return decode_header(b, FrameLimits{1 << 20}).status();
  };
  Status magic = patched(0, 0xdeadbeef, 4);
  CHECK(magic.code() == Err::malformed);
  CHECK(magic.message().find("bad frame magic") != std::string::npos);
  Status version = patched(4, 9, 1);
  CHECK(version.code() == Err::unsupported);
  CHECK(version.message().find("frame version 9 is not supported") != std::string::npos);
  Status type = patched(5, 42, 1);
  CHECK(type.message().find("unknown frame type 42") != std::string::npos);
  Status reserved = patched(6, 2, 2);  // bit 0 is the unhashed flag, bit 1 is no flag
  CHECK(reserved.message().find("reserved") != std::string::npos);
  Status hashed_anyway = patched(6, kUnhashedFlag, 2);  // flagged unhashed, but a hash is there
  CHECK(hashed_anyway.message().find("an unhashed shard frame with a hash") != std::string::npos);
  Status huge = patched(32, 1ull << 40, 8);
  CHECK(huge.code() == Err::too_large);
  CHECK(huge.message().find("exceeds the bound of 1048576 bytes") != std::string::npos);
}

TEST_CASE("a corrupted or truncated payload fails verification", "[sanitize]") {
  std::vector<std::byte> payload(4096, std::byte{3});
  auto bytes = sample(payload);
  auto h = decode_header(bytes, FrameLimits{});
  REQUIRE(h.ok());
  payload[100] = std::byte{4};
  Status s = verify_payload(*h, payload);
  CHECK(s.code() == Err::malformed);
  CHECK(s.message().find("checksum mismatch") != std::string::npos);
  payload.pop_back();
  CHECK(verify_payload(*h, payload).code() == Err::truncated);
}

TEST_CASE("only shard and gather frames travel without a payload hash", "[sanitize]") {
  std::vector<std::byte> payload(4096, std::byte{3});
  for (FrameType type : {FrameType::shard, FrameType::gather}) {
    FrameHeader h;
    h.type = type;
    h.hashed = false;
    seal(h, payload);
    CHECK(h.payload_hash == 0);
    const auto bytes = encode_header(h);
    CHECK(static_cast<unsigned>(bytes[6]) == kUnhashedFlag);
    auto back = decode_header(bytes, FrameLimits{});
    REQUIRE(back.ok());
    CHECK_FALSE(back->hashed);
    payload[100] = std::byte{9};  // not caught here: the TLS record's tag catches it on the wire
    CHECK(verify_payload(*back, payload).ok());
    payload.pop_back();  // the length is still checked
    CHECK(verify_payload(*back, payload).code() == Err::truncated);
    payload.push_back(std::byte{3});
  }
  for (FrameType type : {FrameType::hello, FrameType::control, FrameType::state, FrameType::knock}) {
    FrameHeader h;
    h.type = type;
    h.hashed = false;
    seal(h, std::span(payload).first(8));
    Status s = decode_header(encode_header(h), FrameLimits{}).status();
    CHECK(s.code() == Err::malformed);
    CHECK(s.message().find("without its payload hash (only shard and gather frames may skip it)") != std::string::npos);
  }
}

TEST_CASE("the frame fuzz corpus decodes to a header or an error", "[sanitize]") {
  const std::filesystem::path dir = "tests/corpus";
  REQUIRE(std::filesystem::is_directory(dir));
  int files = 0, valid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ++files;
    if (c.size() < kFrameHeaderSize) continue;
    std::array<std::byte, kFrameHeaderSize> head;
    std::memcpy(head.data(), c.data(), kFrameHeaderSize);
    auto h = decode_header(head, FrameLimits{});
    if (!h.ok()) continue;
    ++valid;
    auto rest = std::as_bytes(std::span(c)).subspan(kFrameHeaderSize);
    (void)verify_payload(*h, rest.first(std::min<std::size_t>(rest.size(), h->payload_size)));
  }
  CHECK(files >= 3);
  CHECK(valid >= 1);
}
