#include "compression/pipeline.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/digest.h"
#include "compression/payload.h"
#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

TEST_CASE("every chain round-trips with finite output, and lossless chains exactly") {
  for (const auto& chain : test::all_chains()) {
    auto p = test::make_pipeline(chain);
    INFO(p.describe());
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{333}, std::size_t{65537}}) {
      auto in = test::gradient(n, n);
      auto payload = test::encode(p, in);
      CHECK(payload.size() <= p.max_encoded_size(n));
      auto out = test::decode(p, payload, n);
      for (float v : out) REQUIRE(std::isfinite(v));
      if (!p.lossy()) CHECK(out == in);
      if (n > 1000) {
        // Every chain here keeps most of the signal.
        CHECK(test::rel_l2(in, out) < 0.999);
      }
    }
  }
}

TEST_CASE("encoding is deterministic: the same input and seed give the same bytes") {
  for (const auto& chain : test::all_chains()) {
    auto p = test::make_pipeline(chain);
    auto q = test::make_pipeline(chain);
    auto in = test::gradient(40000, 11);
    CHECK(xxh3_64(test::encode(p, in, 3)) == xxh3_64(test::encode(q, in, 3)));
  }
}

TEST_CASE("topk | quantize(4) | zstd compresses a pseudo-gradient by far more than 10x") {
  auto p = test::make_pipeline({TopkSpec{0.01, 4096}, QuantizeSpec{4, 128, Rounding::nearest}, ZstdSpec{3}});
  auto in = test::gradient(1 << 20);
  auto payload = test::encode(p, in);
  const double ratio = double(in.size() * 4) / payload.size();
  CHECK(ratio > 50);
  auto out = test::decode(p, payload, in.size());
  // 1% of the values by magnitude carry a large share of a heavy-tailed signal.
  CHECK(test::rel_l2(in, out) < 0.9);
}

TEST_CASE("a payload names its chain and is refused by a pipeline with another chain") {
  auto p4 = test::make_pipeline({QuantizeSpec{4, 128, Rounding::nearest}});
  auto p8 = test::make_pipeline({QuantizeSpec{8, 128, Rounding::nearest}});
  auto in = test::gradient(1000);
  auto payload = test::encode(p4, in);
  std::vector<float> out(in.size());
  Status s = p8.decode(payload, out);
  CHECK(s.code() == Err::mismatch);
  CHECK(s.message().find("quantize(bits=4") != std::string::npos);

  // The chain-agnostic decoder reads it, with the same result.
  REQUIRE(decode_payload(payload, out).ok());
  CHECK(out == test::decode(p4, payload, in.size()));
  auto info = inspect_payload(payload);
  REQUIRE(info.ok());
  CHECK(info->element_count == 1000);
  CHECK(info->chain == "quantize(bits=4, block=128, rounding=nearest)");
}

TEST_CASE(
    "the last encoded payload decodes from its raw body to the same bits as decode(); any other payload falls back") {
  for (const auto& chain : test::all_chains()) {
    auto p = test::make_pipeline(chain);
    INFO(p.describe());
    auto first = test::encode(p, test::gradient(3000, 1));
    auto in = test::gradient(3000, 2);
    auto last = test::encode(p, in, 9);
    std::vector<float> fast(3000), plain(3000);
    REQUIRE(p.decode_last_encoded(last, fast).ok());
    auto q = test::make_pipeline(chain);
    REQUIRE(q.decode(last, plain).ok());
    CHECK(std::memcmp(fast.data(), plain.data(), fast.size() * sizeof(float)) == 0);
    // With a byte codec the body is not read at all: the raw body kept from
    // the encode is (a body damaged after the encode still gives the values).
    const bool bytes_stage = p.describe().find("zstd") != std::string::npos;
    auto header = parse_payload_header(last);
    REQUIRE(header.ok());
    const std::size_t body_at = static_cast<std::size_t>(header->body.data() - last.data());
    if (bytes_stage) {
      std::vector<std::byte> copy = last;
      for (std::size_t i = body_at; i < last.size(); ++i) last[i] = std::byte{0xff};  // no zstd frame any more
      std::vector<float> again(3000);
      REQUIRE(p.decode_last_encoded(last, again).ok());
      CHECK(std::memcmp(again.data(), plain.data(), again.size() * sizeof(float)) == 0);
      last = copy;
    }
    // An earlier payload is decoded whole; so is the last one after a decode().
    REQUIRE(p.decode_last_encoded(first, fast).ok());
    std::vector<float> first_plain(3000);
    REQUIRE(q.decode(first, first_plain).ok());
    CHECK(fast == first_plain);
    if (bytes_stage) {
      for (std::size_t i = body_at; i < last.size(); ++i) last[i] = std::byte{0xff};
      std::vector<float> again(3000);
      CHECK_FALSE(p.decode_last_encoded(last, again).ok());  // decoded whole now: the damage shows
    }
    std::vector<float> other(2999);
    CHECK(p.decode_last_encoded(last, other).code() == Err::mismatch);
  }
}

TEST_CASE("a header check refuses another chain, another length and a cut payload, and leaves the body to decode") {
  auto p = test::make_pipeline({QuantizeSpec{8, 128, Rounding::nearest}, ZstdSpec{3}});
  auto other = test::make_pipeline({QuantizeSpec{4, 128, Rounding::nearest}, ZstdSpec{3}});
  auto payload = test::encode(p, test::gradient(5000));
  CHECK(p.check_header(payload, 5000).ok());
  CHECK(other.check_header(payload, 5000).code() == Err::mismatch);
  const Status length = p.check_header(payload, 4999);
  CHECK(length.code() == Err::mismatch);
  CHECK(length.message() == "payload: holds 5000 values, the receiver expects 4999");
  auto cut = payload;
  cut.pop_back();
  CHECK_FALSE(p.check_header(cut, 5000).ok());
  // A damaged body passes the header check; the decode refuses it.
  auto damaged = payload;
  for (std::size_t i = damaged.size() - 40; i < damaged.size(); ++i) damaged[i] = std::byte{0xff};
  CHECK(p.check_header(damaged, 5000).ok());
  std::vector<float> out(5000);
  CHECK_FALSE(p.decode(damaged, out).ok());
}

TEST_CASE("decoding into a buffer of another size is a mismatch, not a misread") {
  auto p = test::make_pipeline({Fp16Spec{}, ZstdSpec{}});
  auto payload = test::encode(p, test::gradient(500));
  std::vector<float> small(499), large(501);
  CHECK(p.decode(payload, small).code() == Err::mismatch);
  CHECK(p.decode(payload, large).code() == Err::mismatch);
}

TEST_CASE("decode_add gives the bits of a decode then a weighted add, and refuses what decode refuses", "[sanitize]") {
  const std::size_t n = 5003;  // not a multiple of any vector width
  const auto x = test::gradient(n, 9);
  for (const auto& chain : test::all_chains()) {
    for (Simd simd : {Simd::scalar, detected_simd()}) {
      auto p = test::make_pipeline(chain, simd);
      INFO(p.describe());
      const auto payload = test::encode(p, x, 3);
      const auto decoded = test::decode(p, payload, n);
      std::vector<float> expected = test::gradient(n, 4), sum = expected;
      const float share = 0.3f;
      for (std::size_t i = 0; i < n; ++i) expected[i] = expected[i] + share * decoded[i];
      REQUIRE(p.decode_add(payload, sum, share).ok());
      CHECK(digest_f32(sum) == digest_f32(expected));
      std::vector<float> other(n - 1);
      CHECK(p.decode_add(payload, other, share).code() == Err::mismatch);
      auto cut = payload;
      cut.pop_back();
      CHECK_FALSE(p.decode_add(cut, sum, share).ok());
    }
  }
  // A raw payload holding a NaN: refused (the fused path checks every value).
  auto raw = test::make_pipeline({});
  auto values = x;
  for (std::size_t at : {std::size_t{17}, n - 1}) {  // in the vector part, and in the tail
    values = x;
    values[at] = std::nanf("");
    auto payload = test::encode(raw, x, 3);
    std::memcpy(payload.data() + payload.size() - (n - at) * sizeof(float), &values[at], sizeof(float));
    std::vector<float> sum(n);
    Status s = raw.decode_add(payload, sum, 1.0f);
    CHECK(s.code() == Err::malformed);
    CHECK(s.message().find("NaN or Inf") != std::string::npos);
  }
}

TEST_CASE("encode refuses non-finite input and a too-small output buffer") {
  for (const auto& chain : test::all_chains()) {
    auto p = test::make_pipeline(chain);
    INFO(p.describe());
    auto in = test::gradient(5000);
    in[4321] = std::nanf("");
    std::vector<std::byte> out(p.max_encoded_size(in.size()));
    CHECK(p.encode(in, out, 0).status().code() == Err::non_finite);
    in[4321] = 0.0f;
    std::vector<std::byte> small(p.max_encoded_size(in.size()) - 1);
    CHECK(p.encode(in, small, 0).status().code() == Err::invalid_argument);
  }
}

TEST_CASE("pipeline specs are validated with the rule that was broken") {
  auto msg = [](std::vector<StageSpec> stages) { return validate(PipelineSpec{std::move(stages)}).message(); };
  CHECK(msg({}).empty());  // raw fp32 is a valid, lossless pipeline
  CHECK(msg({ZstdSpec{}, QuantizeSpec{}}).find("cannot come after zstd") != std::string::npos);
  CHECK(msg({QuantizeSpec{}, TopkSpec{}}).find("the order is topk") != std::string::npos);
  CHECK(msg({Fp16Spec{}, Bf16Spec{}}).find("at most one") != std::string::npos);
  CHECK(msg({QuantizeSpec{3, 128}}).find("bits must be 8, 4 or 2") != std::string::npos);
  CHECK(msg({QuantizeSpec{8, 100}}).find("multiple of 8") != std::string::npos);
  CHECK(msg({TopkSpec{0.0, 128}}).find("density") != std::string::npos);
  CHECK(msg({ZstdSpec{42}}).find("zstd.level") != std::string::npos);
  CHECK(Pipeline::create(PipelineSpec{{ZstdSpec{42}}}).status().code() == Err::invalid_argument);
}

TEST_CASE("error feedback is on by default exactly for lossy pipelines") {
  CHECK(test::make_pipeline({TopkSpec{}}).error_feedback());
  CHECK_FALSE(test::make_pipeline({ZstdSpec{}}).error_feedback());
  auto off = Pipeline::create(PipelineSpec{{QuantizeSpec{}}, ErrorFeedbackMode::off});
  REQUIRE(off.ok());
  CHECK_FALSE(off->error_feedback());
}
