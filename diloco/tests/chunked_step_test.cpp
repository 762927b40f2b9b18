// The outer step on a Δ given in chunks: the same bits as stepping Δ whole,
// and the digest predicted before the step is the digest after it.
#include "diloco/chunked_step.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "common/digest.h"

using namespace geoloco;
using namespace geoloco::diloco;

namespace {
// Δ of `values` cut into chunks of `chunk` values (the last one shorter).
ChunkedDelta chunks_of(const std::vector<float>& values, std::size_t chunk) {
  return [&values, chunk](const ChunkFn& fn) -> Status {
    for (std::size_t begin = 0; begin < values.size(); begin += chunk) {
      const std::size_t n = std::min(chunk, values.size() - begin);
      GEOLOCO_TRY(fn(begin, std::span<const float>(values).subspan(begin, n)));
    }
    return Status();
  };
}
}  // namespace

TEST_CASE("stepping a range chunk by chunk: the bits of a whole step, the digest foretold, the clip of the whole") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t n = 1000, at = 300, length = 450;  // the round's range: [300, 750)
  std::vector<float> anchor(n), momentum(n), delta(length);
  for (auto& v : anchor) v = normal(rng);
  for (auto& v : momentum) v = 0.1f * normal(rng);
  for (auto& v : delta) v = 0.01f * normal(rng);
  OuterOptimizerOptions o;
  o.clip_norm = 0.1;  // ||Δ|| is about 0.21: clipped

  auto scale = chunked_clip_scale(chunks_of(delta, 64), o.clip_norm);
  REQUIRE(scale.ok());
  CHECK(*scale == clip_scale(std::sqrt(squared_norm(delta)), o.clip_norm));
  CHECK(*scale < 1.0f);

  // Whole, with outer_step on the range.
  std::vector<float> whole_a = anchor, whole_m = momentum;
  REQUIRE(outer_step(std::span<float>(whole_a).subspan(at, length), std::span<float>(whole_m).subspan(at, length),
                     delta, o, *scale)
              .ok());

  auto foretold = stepped_anchor_digest(anchor, momentum, at, length, chunks_of(delta, 64), o, *scale);
  REQUIRE(foretold.ok());
  std::vector<float> a = anchor, m = momentum;
  REQUIRE(step_chunks(a, m, at, chunks_of(delta, 64), o, *scale).ok());
  CHECK(a == whole_a);
  CHECK(m == whole_m);
  CHECK(*foretold == digest_f32(a));
  CHECK(*foretold != digest_f32(anchor));
  // Another chunk size, the same bits.
  std::vector<float> b = anchor, mb = momentum;
  REQUIRE(step_chunks(b, mb, at, chunks_of(delta, 7), o, *scale).ok());
  CHECK(b == whole_a);

  // A range outside the anchor is refused, and nothing is stepped.
  CHECK(stepped_anchor_digest(anchor, momentum, 800, length, chunks_of(delta, 64), o, *scale).status().code() ==
        Err::invalid_argument);
  std::vector<float> c = anchor, mc = momentum;
  CHECK(step_chunks(c, mc, 990, chunks_of(delta, 64), o, *scale).code() == Err::invalid_argument);
  CHECK(c == anchor);

  // The step with its digest in one pass: the same bits, and the digest foretold.
  std::vector<float> d = anchor, md = momentum;
  auto stepped = step_chunks_digest(d, md, at, length, chunks_of(delta, 64), o, *scale);
  REQUIRE(stepped.ok());
  CHECK(d == whole_a);
  CHECK(md == whole_m);
  CHECK(*stepped == *foretold);
  // The whole anchor as the range (no values before or after it).
  std::vector<float> full_delta(n, 0.001f), e = anchor, me = momentum, f = anchor, mf = momentum;
  auto full = step_chunks_digest(e, me, 0, n, chunks_of(full_delta, 100), o, *scale);
  REQUIRE(full.ok());
  REQUIRE(step_chunks(f, mf, 0, chunks_of(full_delta, 100), o, *scale).ok());
  CHECK(*full == digest_f32(f));
  // Chunks that skip values, or do not reach the range's end, are refused.
  ChunkedDelta skipping = [&delta](const ChunkFn& fn) -> Status {
    GEOLOCO_TRY(fn(0, std::span<const float>(delta).first(100)));
    return fn(200, std::span<const float>(delta).subspan(200, 100));
  };
  std::vector<float> g = anchor, mg = momentum;
  const auto skipped = step_chunks_digest(g, mg, at, length, skipping, o, *scale);
  CHECK(skipped.status().code() == Err::invalid_argument);
  CHECK(skipped.status().message() ==
        "a chunk of Δ at 200 of 100 values, where the step expects the values from 100 of 450");
  const auto short_of = step_chunks_digest(g, mg, at, length + 1, chunks_of(delta, 64), o, *scale);
  CHECK(short_of.status().message() == "the chunks of Δ end at 450 of the round's 451 values");
  CHECK(step_chunks_digest(g, mg, 990, length, chunks_of(delta, 64), o, *scale).status().code() ==
        Err::invalid_argument);
}

TEST_CASE("without a clip the scale is 1 and Δ is not read for it") {
  int passes = 0;
  ChunkedDelta counted = [&passes](const ChunkFn&) -> Status {
    ++passes;
    return GEOLOCO_ERROR(Err::malformed, "a chunk that does not decode");
  };
  auto scale = chunked_clip_scale(counted, 0.0);
  REQUIRE(scale.ok());
  CHECK(*scale == 1.0f);
  CHECK(passes == 0);
  // With a clip, Δ is read, and its error is the scale's.
  CHECK(chunked_clip_scale(counted, 1.0).status().code() == Err::malformed);
  CHECK(passes == 1);
}
