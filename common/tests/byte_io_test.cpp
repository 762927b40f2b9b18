#include "common/byte_io.h"

#include <array>
#include <catch2/catch.hpp>

using geoloco::ByteReader;
using geoloco::ByteWriter;

TEST_CASE("byte writer and reader round-trip little-endian fields and varints") {
  std::array<std::byte, 64> buf{};
  ByteWriter w(buf);
  w.put<std::uint32_t>(0x01020304u);
  w.put<std::uint8_t>(7);
  w.put_varint(0);
  w.put_varint(127);
  w.put_varint(128);
  w.put_varint(~0ull);
  REQUIRE_FALSE(w.failed());
  CHECK(static_cast<int>(buf[0]) == 0x04);  // little-endian on the wire
  CHECK(static_cast<int>(buf[3]) == 0x01);
  CHECK(w.size() == 4 + 1 + 1 + 1 + 2 + 10);

  ByteReader r(std::span<const std::byte>(buf.data(), w.size()));
  CHECK(r.get<std::uint32_t>() == 0x01020304u);
  CHECK(r.get<std::uint8_t>() == 7);
  CHECK(r.get_varint() == 0);
  CHECK(r.get_varint() == 127);
  CHECK(r.get_varint() == 128);
  CHECK(r.get_varint() == ~0ull);
  CHECK_FALSE(r.failed());
  CHECK(r.remaining() == 0);
}

TEST_CASE("writer refuses to write past the end of its span") {
  std::array<std::byte, 3> buf{};
  ByteWriter w(buf);
  w.put<std::uint32_t>(1);
  CHECK(w.failed());
  CHECK(w.size() == 0);
}

TEST_CASE("reader fails on truncated fields and overlong varints") {
  std::array<std::byte, 2> two{std::byte{1}, std::byte{2}};
  ByteReader r(two);
  (void)r.get<std::uint32_t>();
  CHECK(r.failed());

  std::array<std::byte, 11> overlong{};
  overlong.fill(std::byte{0x80});
  ByteReader v(overlong);
  (void)v.get_varint();
  CHECK(v.failed());

  // 10th byte may only carry the top bit of a 64-bit value.
  std::array<std::byte, 10> overflow{};
  overflow.fill(std::byte{0xff});
  overflow[9] = std::byte{0x02};
  ByteReader o(overflow);
  (void)o.get_varint();
  CHECK(o.failed());

  std::array<std::byte, 1> unterminated{std::byte{0x80}};
  ByteReader u(unterminated);
  (void)u.get_varint();
  CHECK(u.failed());
}
