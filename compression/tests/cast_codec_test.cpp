#include "compression/cast_codec.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

namespace {
std::vector<float> roundtrip(const CastCodec& c, const std::vector<float>& in) {
  std::vector<std::byte> enc(c.encoded_size(in.size()));
  REQUIRE(c.encode(in, enc, 0).ok());
  std::vector<float> out(in.size());
  REQUIRE(c.decode(enc, out).ok());
  return out;
}
}  // namespace

TEST_CASE("fp16 keeps values it can represent exactly and rounds others within half an ulp") {
  CastCodec c(CastCodec::Format::fp16);
  std::vector<float> exact{0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 0x1p-24f, -0x1p-14f, 1000.5f};
  auto out = roundtrip(c, exact);
  for (std::size_t i = 0; i < exact.size(); ++i)
    CHECK(std::bit_cast<std::uint32_t>(out[i]) == std::bit_cast<std::uint32_t>(exact[i]));

  auto g = test::gradient(50000);
  for (auto& v : g) v *= 1000.0f;  // into fp16's normal range
  auto r = roundtrip(c, g);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const float bound = std::max(std::fabs(g[i]) * 0x1p-11f, 0x1p-25f);  // half ulp, or half a subnormal step
    REQUIRE(std::fabs(r[i] - g[i]) <= bound);
  }
}

TEST_CASE("fp16 saturates at 65504 instead of producing Inf") {
  CastCodec c(CastCodec::Format::fp16);
  auto out = roundtrip(c, {1e6f, -3e38f, 65519.0f, 65520.0f});
  CHECK(out == std::vector<float>{65504.0f, -65504.0f, 65504.0f, 65504.0f});
}

TEST_CASE("bf16 rounds to nearest even within 2^-8 relative and never to Inf") {
  CastCodec c(CastCodec::Format::bf16);
  auto g = test::gradient(50000);
  auto r = roundtrip(c, g);
  for (std::size_t i = 0; i < g.size(); ++i)
    REQUIRE(std::fabs(r[i] - g[i]) <= std::fabs(g[i]) * 0x1p-8f + 0x1p-133f);  // half an ulp, or a subnormal step
  auto big = roundtrip(c, {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()});
  CHECK(std::isfinite(big[0]));
  CHECK(big[0] > 3.3e38f);
  CHECK(big[1] < -3.3e38f);
  // Tie: 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7; even wins.
  CHECK(roundtrip(c, {1.0f + 0x1p-8f})[0] == 1.0f);
}

TEST_CASE("casts refuse NaN and Inf on encode and Inf patterns on decode") {
  for (auto format : {CastCodec::Format::fp16, CastCodec::Format::bf16}) {
    CastCodec c(format);
    std::vector<float> in(10000, 1.0f);
    in[9000] = std::numeric_limits<float>::quiet_NaN();
    std::vector<std::byte> enc(c.encoded_size(in.size()));
    Status s = c.encode(in, enc, 0);
    CHECK(s.code() == Err::non_finite);
    CHECK(s.message().find("[8192, 10000)") != std::string::npos);
    in[9000] = -std::numeric_limits<float>::infinity();
    CHECK(c.encode(in, enc, 0).code() == Err::non_finite);

    in[9000] = 1.0f;
    REQUIRE(c.encode(in, enc, 0).ok());
    const std::uint16_t inf = format == CastCodec::Format::fp16 ? 0x7c00 : 0x7f80;
    std::memcpy(enc.data() + 2 * 77, &inf, 2);
    std::vector<float> out(in.size());
    CHECK(c.decode(enc, out).code() == Err::malformed);
    CHECK(c.decode(std::span(enc).first(enc.size() - 2), out).code() == Err::mismatch);
  }
}
