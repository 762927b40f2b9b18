#include "compression/quantize_codec.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

namespace {
std::vector<float> roundtrip(const QuantizeCodec& c, const std::vector<float>& in, std::uint64_t seed,
                             std::size_t* size = nullptr) {
  std::vector<std::byte> enc(c.encoded_size(in.size()));
  REQUIRE(c.encode(in, enc, seed).ok());
  if (size) *size = enc.size();
  std::vector<float> out(in.size());
  REQUIRE(c.decode(enc, out).ok());
  return out;
}
}  // namespace

TEST_CASE("quantize stays within its per-block bound for every width, block and rounding") {
  auto bits = GENERATE(8u, 4u, 2u);
  auto block = GENERATE(8u, 128u, 1024u);
  auto rounding = GENERATE(Rounding::nearest, Rounding::stochastic);
  auto n = GENERATE(std::size_t{1}, std::size_t{1000}, std::size_t{4099});
  QuantizeCodec c(QuantizeSpec{bits, block, rounding});
  auto in = test::gradient(n, bits * 31 + block);
  std::size_t size = 0;
  auto out = roundtrip(c, in, 99, &size);
  CHECK(size == ((n + block - 1) / block) * 4 + (n * bits + 7) / 8);
  for (std::size_t b = 0; b * block < n; ++b) {
    float absmax = 0;
    for (std::size_t i = b * block; i < std::min<std::size_t>(n, (b + 1) * block); ++i)
      absmax = std::max(absmax, std::fabs(in[i]));
    const float scale = absmax / float(c.qmax());
    // Nearest: half a step. Stochastic: less than one step. Plus float rounding.
    const float bound = (rounding == Rounding::nearest ? 0.5f : 1.0f) * scale * (1 + 1e-5f) + 1e-30f;
    for (std::size_t i = b * block; i < std::min<std::size_t>(n, (b + 1) * block); ++i) {
      INFO("bits " << bits << " block " << block << " i " << i);
      REQUIRE(std::fabs(out[i] - in[i]) <= bound);
    }
  }
}

TEST_CASE("quantize maps a block's extremes exactly and zero blocks to zero") {
  QuantizeCodec c(QuantizeSpec{8, 8, Rounding::nearest});
  std::vector<float> in{0.5f, -1.27f, 1.27f, 0.0f, 0, 0, 0, 0, /* zero block */ 0, 0, 0, 0, 0, 0, 0, 0};
  auto out = roundtrip(c, in, 0);
  CHECK(out[1] == Approx(-1.27f).epsilon(1e-6));
  CHECK(out[2] == Approx(1.27f).epsilon(1e-6));
  for (std::size_t i = 8; i < 16; ++i) CHECK(out[i] == 0.0f);
}

TEST_CASE("stochastic rounding is unbiased: the mean error shrinks like 1/sqrt(draws)") {
  QuantizeCodec c(QuantizeSpec{2, 64, Rounding::stochastic});
  auto in = test::gradient(64, 5);
  auto mean_abs_error = [&](int draws) {
    std::vector<double> sum(in.size(), 0.0);
    for (int d = 0; d < draws; ++d) {
      auto out = roundtrip(c, in, 1000 + d);
      for (std::size_t i = 0; i < in.size(); ++i) sum[i] += out[i];
    }
    double err = 0;
    for (std::size_t i = 0; i < in.size(); ++i) err += std::fabs(sum[i] / draws - in[i]);
    return err / in.size();
  };
  const double e100 = mean_abs_error(100), e6400 = mean_abs_error(6400);
  // 64x the draws: an unbiased estimator's error falls ~8x. A biased one
  // (e.g. nearest rounding) would not fall at all.
  CHECK(e6400 < e100 / 4);
  float absmax = 0;
  for (float v : in) absmax = std::max(absmax, std::fabs(v));
  CHECK(e6400 < 0.02 * absmax);

  QuantizeCodec nearest(QuantizeSpec{2, 64, Rounding::nearest});
  auto once = roundtrip(nearest, in, 0);
  double biased = 0;
  for (std::size_t i = 0; i < in.size(); ++i) biased += std::fabs(once[i] - in[i]);
  CHECK(biased / in.size() > 4 * e6400);
}

TEST_CASE("stochastic rounding is reproducible from its seed") {
  QuantizeCodec c(QuantizeSpec{4, 128, Rounding::stochastic});
  auto in = test::gradient(1000, 3);
  CHECK(roundtrip(c, in, 5) == roundtrip(c, in, 5));
  CHECK(roundtrip(c, in, 5) != roundtrip(c, in, 6));
}

TEST_CASE("quantize refuses non-finite input and malformed scales") {
  QuantizeCodec c(QuantizeSpec{8, 128, Rounding::nearest});
  std::vector<float> in(300, 0.25f);
  std::vector<std::byte> enc(c.encoded_size(in.size()));
  in[200] = std::numeric_limits<float>::infinity();
  Status s = c.encode(in, enc, 0);
  CHECK(s.code() == Err::non_finite);
  CHECK(s.message().find("[128, 256)") != std::string::npos);
  in[200] = 0.25f;
  REQUIRE(c.encode(in, enc, 0).ok());
  std::vector<float> out(in.size());
  const float bad = -1.0f;
  std::memcpy(enc.data() + 4, &bad, 4);  // scale of block 1
  s = c.decode(enc, out);
  CHECK(s.code() == Err::malformed);
  CHECK(s.message().find("block 1") != std::string::npos);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(enc.data() + 4, &nan, 4);
  CHECK(c.decode(enc, out).code() == Err::malformed);
}

TEST_CASE("quantize near FLT_MAX, and any code under any finite scale, decodes to finite values") {
  for (unsigned bits : {8u, 4u, 2u}) {
    QuantizeCodec c(QuantizeSpec{bits, 8, Rounding::nearest});
    std::vector<float> in{std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1.0f, 0, 0, 0, 0, 0};
    auto out = roundtrip(c, in, 0);
    for (float v : out) CHECK(std::isfinite(v));
    CHECK(out[0] == std::numeric_limits<float>::max());
    CHECK(out[1] == -std::numeric_limits<float>::max());

    // A damaged payload: scale FLT_MAX and every code byte 0x80 (the most
    // negative code of every width, which no encoder writes). Found by fuzzing.
    std::vector<std::byte> enc(c.encoded_size(in.size()));
    REQUIRE(c.encode(in, enc, 0).ok());
    const float huge = std::numeric_limits<float>::max();
    std::memcpy(enc.data(), &huge, 4);
    for (std::size_t i = 4; i < enc.size(); ++i)
      enc[i] = static_cast<std::byte>(bits == 8 ? 0x80 : (bits == 4 ? 0x88 : 0xaa));
    std::vector<float> decoded(in.size());
    REQUIRE(c.decode(enc, decoded).ok());
    for (float v : decoded) CHECK(v == -std::numeric_limits<float>::max());
  }
}
