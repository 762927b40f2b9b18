#include "compression/zstd_codec.h"

#include <catch2/catch.hpp>
#include <vector>

#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

TEST_CASE("zstd round-trips bytes exactly and refuses corrupt or resized frames") {
  ZstdCodec z(ZstdSpec{3});
  std::vector<std::byte> raw(100000);
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = std::byte((i * i) >> 7);
  std::vector<std::byte> enc(z.max_encoded_size(raw.size()));
  auto size = z.encode(raw, enc);
  REQUIRE(size.ok());
  enc.resize(*size);
  CHECK(enc.size() < raw.size());
  std::vector<std::byte> out(raw.size());
  REQUIRE(z.decode(enc, out).ok());
  CHECK(out == raw);

  std::vector<std::byte> wrong_size(raw.size() - 1);
  CHECK(z.decode(enc, wrong_size).code() == Err::malformed);
  CHECK(z.decode(std::span(enc).first(enc.size() / 2), out).code() == Err::malformed);
  enc[0] ^= std::byte{0xff};  // magic
  CHECK(z.decode(enc, out).code() == Err::malformed);
}

TEST_CASE("a zstd-only pipeline is lossless for fp32, bit for bit") {
  auto p = test::make_pipeline({ZstdSpec{3}});
  auto in = test::gradient(70000);
  in[5] = -0.0f;
  in[6] = 1e-42f;  // subnormal
  auto out = test::decode(p, test::encode(p, in), in.size());
  REQUIRE(std::memcmp(in.data(), out.data(), in.size() * 4) == 0);
  CHECK_FALSE(p.lossy());
  CHECK_FALSE(p.error_feedback());
}
