// The outer step on a Δ given in chunks: the same bits as stepping Δ whole,
// and the digest predicted before the step is the digest after it.
#include "diloco/chunked_step.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <bit>
#include <numeric>
#include <deque>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/digest.h"

using namespace geoloco;
using namespace geoloco::diloco;

namespace {
// Δ of `values` cut into chunks of `chunk` values (the last one shorter),
// each decoded by copying it; `fail_at`: that chunk does not decode.
struct Chunks {
  Chunks(const std::vector<float>& v, std::size_t chunk, std::size_t fail = SIZE_MAX) : values(v), fail_at(fail) {
    for (std::size_t begin = 0; begin < values.size(); begin += chunk)
      ranges.push_back({begin, std::min(chunk, values.size() - begin)});
  }
  const std::vector<float>& values;
  std::size_t fail_at;
  std::vector<Range> ranges;
  std::atomic<int> decoders{0};
  operator ChunkList() {
    return ChunkList{ranges, [this]() -> ChunkDecoder {
                       ++decoders;
                       return [this](std::size_t i, std::span<float> out) -> Status {
                         if (i == fail_at) return GEOLOCO_ERROR(Err::malformed, "chunk ", i, " does not decode");
                         std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(ranges[i].begin), out.size(),
                                     out.begin());
                         return Status();
                       };
                     }};
  }
};
ChunkList chunks_of(const std::vector<float>& values, std::size_t chunk) {
  // Kept for the test's length: the list refers to it.
  static std::deque<Chunks> kept;
  return kept.emplace_back(values, chunk);
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
  const std::vector<Range> gap{{0, 100}, {200, 100}};
  const ChunkList skipping{gap, chunks_of(delta, 64).decoder};
  std::vector<float> g = anchor, mg = momentum;
  const auto skipped = step_chunks_digest(g, mg, at, length, skipping, o, *scale);
  CHECK(skipped.status().code() == Err::invalid_argument);
  CHECK(skipped.status().message() == "chunk 1 of Δ starts at value 200, where the values from 100 are expected");
  CHECK(step_chunks(g, mg, at, skipping, o, *scale).code() == Err::invalid_argument);
  CHECK(g == anchor);
  const auto short_of = step_chunks_digest(g, mg, at, length + 1, chunks_of(delta, 64), o, *scale);
  CHECK(short_of.status().message() == "the chunks of Δ end at 450 of the round's 451 values");
  CHECK(step_chunks_digest(g, mg, 990, length, chunks_of(delta, 64), o, *scale).status().code() ==
        Err::invalid_argument);
  CHECK(g == anchor);
}

TEST_CASE("a pass on several threads: the bits, digests, clip and first error of one thread") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t n = 20011, at = 1234, length = 17000;
  std::vector<float> anchor(n), momentum(n), delta(length);
  for (auto& v : anchor) v = normal(rng);
  for (auto& v : momentum) v = 0.1f * normal(rng);
  for (auto& v : delta) v = 0.001f * normal(rng);
  OuterOptimizerOptions o;
  o.clip_norm = 0.05;  // ||Δ|| is about 0.13: clipped, so the sum of squares' order shows in the scale's bits

  std::vector<float> one_a = anchor, one_m = momentum;
  const auto one_scale = chunked_clip_scale(chunks_of(delta, 333), o.clip_norm, 1);
  REQUIRE(one_scale.ok());
  CHECK(*one_scale < 1.0f);
  const auto one_foretold =
      stepped_anchor_digest(anchor, momentum, at, length, chunks_of(delta, 333), o, *one_scale, 1);
  const auto one_stepped = step_chunks_digest(one_a, one_m, at, length, chunks_of(delta, 333), o, *one_scale, 1);
  REQUIRE(one_foretold.ok());
  REQUIRE(one_stepped.ok());
  CHECK(*one_foretold == *one_stepped);
  for (unsigned threads : {2u, 3u, 4u, 7u, 64u}) {
    CAPTURE(threads);
    double helpers = 0;
    Chunks counted(delta, 333);
    const auto scale = chunked_clip_scale(counted, o.clip_norm, {threads, &helpers});
    REQUIRE(scale.ok());
    CHECK(std::bit_cast<std::uint32_t>(*scale) == std::bit_cast<std::uint32_t>(*one_scale));
    CHECK(counted.decoders.load() == static_cast<int>(std::min<std::size_t>(threads, counted.ranges.size())));
    CHECK(helpers > 0.0);  // the helpers' CPU is counted
    const auto foretold =
        stepped_anchor_digest(anchor, momentum, at, length, chunks_of(delta, 333), o, *scale, threads);
    REQUIRE(foretold.ok());
    CHECK(*foretold == *one_foretold);
    std::vector<float> a = anchor, m = momentum;
    const auto stepped = step_chunks_digest(a, m, at, length, chunks_of(delta, 333), o, *scale, threads);
    REQUIRE(stepped.ok());
    CHECK(*stepped == *one_stepped);
    CHECK(a == one_a);
    CHECK(m == one_m);
    std::vector<float> b = anchor, mb = momentum;
    REQUIRE(step_chunks(b, mb, at, chunks_of(delta, 333), o, *scale, threads).ok());
    CHECK(b == one_a);
  }
  // One thread alone counts no helper CPU.
  double none = 0;
  REQUIRE(chunked_clip_scale(chunks_of(delta, 333), o.clip_norm, {1, &none}).ok());
  CHECK(none == 0.0);

  // Chunks 20 and 40 do not decode: the error is chunk 20's on every thread count.
  for (unsigned threads : {1u, 2u, 4u}) {
    CAPTURE(threads);
    Chunks broken(delta, 333, 20);
    std::vector<float> a = anchor, m = momentum;
    const auto stepped = step_chunks_digest(a, m, at, length, broken, o, *one_scale, threads);
    CHECK(stepped.status().code() == Err::malformed);
    CHECK(stepped.status().message() == "chunk 20 does not decode");
    CHECK(std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(at + 20 * 333), one_a.begin()));
    CHECK(stepped_anchor_digest(anchor, momentum, at, length, broken, o, *one_scale, threads).status().message() ==
          "chunk 20 does not decode");
  }
}

TEST_CASE("run_chunk_pass calls in_order once a chunk, in order, with what work made of it") {
  std::vector<float> values(1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  for (unsigned threads : {1u, 3u, 8u}) {
    CAPTURE(threads);
    std::vector<std::size_t> order;
    std::vector<float> seen;
    const Status s = run_chunk_pass(
        chunks_of(values, 37), threads,
        [](std::size_t, std::uint64_t, std::span<float> v,
           std::vector<float>& scratch) -> Result<std::span<const float>> {
          scratch.assign(v.begin(), v.end());
          for (auto& x : scratch) x = -x;
          return std::span<const float>(scratch);
        },
        [&](std::size_t i, std::uint64_t begin, std::span<const float> v) {
          order.push_back(i);
          CHECK(begin == 37 * i);
          seen.insert(seen.end(), v.begin(), v.end());
          return Status();
        });
    REQUIRE(s.ok());
    std::vector<std::size_t> expected(28);
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(order == expected);
    REQUIRE(seen.size() == values.size());
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(seen[i] == -values[i]);
    // An in_order error stops the pass there.
    std::size_t calls = 0;
    const Status stopped =
        run_chunk_pass(chunks_of(values, 37), threads, {}, [&](std::size_t i, std::uint64_t, std::span<const float>) {
          ++calls;
          return i == 5 ? GEOLOCO_ERROR(Err::mismatch, "stop at 5") : Status();
        });
    CHECK(stopped.message() == "stop at 5");
    CHECK(calls == 6);
  }
  // What a callback throws is the chunk's error, and every thread still ends.
  for (unsigned threads : {1u, 4u}) {
    const Status thrown = run_chunk_pass(
        chunks_of(values, 37), threads,
        [](std::size_t i, std::uint64_t, std::span<float> v, std::vector<float>&) -> Result<std::span<const float>> {
          if (i == 3 || i == 9) throw std::runtime_error("boom");
          return std::span<const float>(v);
        },
        {});
    CHECK(thrown.code() == Err::internal);
    CHECK(thrown.message() == "a pass over Δ, at chunk 3: boom");
    const Status in_order_thrown =
        run_chunk_pass(chunks_of(values, 37), threads, {}, [](std::size_t i, std::uint64_t, std::span<const float>) {
          if (i == 2) throw std::runtime_error("late");
          return Status();
        });
    CHECK(in_order_thrown.message() == "a pass over Δ, at chunk 2: late");
  }
  // Given up: from the start, nothing is decoded; midway, the pass ends there.
  for (unsigned threads : {1u, 4u}) {
    std::atomic<bool> cancel{true};
    Chunks counted(values, 37);
    std::size_t calls = 0;
    const Status at_once = run_chunk_pass(counted, {threads, nullptr, &cancel}, {},
                                          [&](std::size_t, std::uint64_t, std::span<const float>) {
                                            ++calls;
                                            return Status();
                                          });
    CHECK(at_once.code() == Err::io);
    CHECK(at_once.message() == "the pass over Δ was given up at chunk 0 of 28");
    CHECK(calls == 0);
    cancel = false;
    const Status midway = run_chunk_pass(counted, {threads, nullptr, &cancel}, {},
                                         [&](std::size_t i, std::uint64_t, std::span<const float>) {
                                           if (i == 5) cancel = true;
                                           return Status();
                                         });
    CHECK(midway.code() == Err::io);
    CHECK_THAT(midway.message(), Catch::StartsWith("the pass over Δ was given up at chunk "));
  }
  // No chunks: nothing to do.
  CHECK(run_chunk_pass(ChunkList{{}, nullptr}, 4, {}, {}).ok());
}

TEST_CASE("without a clip the scale is 1 and Δ is not read for it") {
  const std::vector<float> values(10, 1.0f);
  Chunks counted(values, 4, 0);
  auto scale = chunked_clip_scale(counted, 0.0);
  REQUIRE(scale.ok());
  CHECK(*scale == 1.0f);
  CHECK(counted.decoders.load() == 0);
  // With a clip, Δ is read, and its error is the scale's.
  CHECK(chunked_clip_scale(counted, 1.0).status().code() == Err::malformed);
  CHECK(counted.decoders.load() == 1);
}
