#include "common/status.h"
#include "common/digest.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace geoloco;

namespace {
Status refuse_negative(int x) {
  GEOLOCO_RETURN_IF(x < 0, Err::invalid_argument, "x must be >= 0, got ", x);
  return {};
}
Result<int> twice(int x) {
  GEOLOCO_TRY(refuse_negative(x));
  return 2 * x;
}
}  // namespace

TEST_CASE("RETURN_IF records code, message and file:line") {
  Status s = refuse_negative(-3);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == Err::invalid_argument);
  CHECK(s.message() == "x must be >= 0, got -3");
  CHECK(s.to_string().find("invalid_argument: x must be >= 0, got -3 (") == 0);
  CHECK(s.to_string().find("status_test.cpp:") != std::string::npos);
  CHECK(refuse_negative(1).ok());
}

TEST_CASE("Result carries a value or the error that TRY propagated") {
  auto good = twice(21);
  REQUIRE(good.ok());
  CHECK(*good == 42);
  auto bad = twice(-1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Err::invalid_argument);
}

TEST_CASE("digest_f32 is xxh3 of the fp32 bit patterns") {
  std::vector<float> a{1.0f, -0.0f, 3.5f};
  std::vector<float> b{1.0f, 0.0f, 3.5f};
  CHECK(digest_f32(a) != digest_f32(b));
  CHECK(digest_f32(a) == xxh3_64(std::as_bytes(std::span<const float>(a))));
  CHECK(digest_hex(0xabcull) == "0000000000000abc");
  // A fixed value, so the digest function cannot change unnoticed.
  CHECK(xxh3_64({}) == 0x2d06800538d394c2ull);
}

TEST_CASE("a streaming digest over pieces equals the digest of the whole") {
  std::vector<float> whole(1000);
  for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i) * 0.25f - 7.0f;
  StreamingDigest d;
  d.update(std::span<const float>(whole).first(1));
  d.update(std::span<const float>(whole).subspan(1, 500));
  d.update(std::span<const float>(whole).subspan(501));
  CHECK(d.value() == digest_f32(whole));
  StreamingDigest empty;
  CHECK(empty.value() == xxh3_64({}));
}
