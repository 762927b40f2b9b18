#include "outer/aggregator.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

#include "common/digest.h"
#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::outer;
using compression::ChunkLayout;

namespace {

struct Arrival {
  std::uint32_t site;
  std::uint64_t chunk;
};

// Feeds every (site, chunk) in `order` and assembles the reduced tensor.
std::vector<float> aggregate(const std::vector<std::vector<float>>& inputs, const std::vector<Participant>& who,
                             ChunkLayout layout, const std::vector<Arrival>& order) {
  auto agg = ChunkAggregator::create(layout, who, layout.count());
  REQUIRE(agg.ok());
  std::vector<float> out(layout.total, -1.0f);
  for (const auto& a : order) {
    auto values = std::span<const float>(inputs[a.site]).subspan(layout.offset(a.chunk), layout.length(a.chunk));
    auto r = agg->add_decoded(a.site, a.chunk, values);
    REQUIRE(r.ok());
    if (r->has_value()) std::copy((*r)->begin(), (*r)->end(), out.begin() + layout.offset(a.chunk));
  }
  REQUIRE(agg->complete());
  REQUIRE(agg->chunks_in_flight() == 0);
  return out;
}

}  // namespace

TEST_CASE("aggregator: shuffled chunk arrival gives bit-identical results") {
  const std::size_t n = 1000;
  const ChunkLayout layout{n, 64};
  std::vector<std::vector<float>> inputs;
  std::vector<Participant> who;
  for (std::uint32_t s = 0; s < 5; ++s) {
    inputs.push_back(compression::test::gradient(n, 100 + s));
    who.push_back({s, 1000.0 + 37.0 * s});  // token weights
  }
  std::vector<Arrival> order;
  for (std::uint32_t s = 0; s < 5; ++s)
    for (std::uint64_t c = 0; c < layout.count(); ++c) order.push_back({s, c});
  const auto reference = aggregate(inputs, who, layout, order);

  // A naive sum in arrival order would differ between orders: show that the
  // test inputs are sensitive, so the equality below means something.
  bool naive_differs = false;
  std::vector<float> first_naive;
  double total_weight = 0;
  for (const auto& p : who) total_weight += p.weight;
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    const auto shuffled = aggregate(inputs, who, layout, order);
    REQUIRE(digest_f32(shuffled) == digest_f32(reference));
    std::vector<float> naive(n, 0.0f);
    for (const auto& a : order)
      for (std::uint64_t i = 0; i < layout.length(a.chunk); ++i)
        naive[layout.offset(a.chunk) + i] += static_cast<float>(who[a.site].weight / total_weight) *
                                              inputs[a.site][layout.offset(a.chunk) + i];
    if (trial == 0) first_naive = naive;
    naive_differs = naive_differs || naive != first_naive;
  }
  CHECK(naive_differs);
  // The participants' listing order does not matter either.
  std::reverse(who.begin(), who.end());
  CHECK(digest_f32(aggregate(inputs, who, layout, order)) == digest_f32(reference));
}

TEST_CASE("aggregator: the weighted mean, with closed-form answers") {
  const ChunkLayout layout{4, 3};
  const std::vector<std::vector<float>> inputs{{1, 2, 3, 4}, {3, 6, 9, 12}};
  // Weights 1 and 3: (1·x + 3·3x) / 4 = 2.5 x.
  const auto out = aggregate(inputs, {{0, 1.0}, {1, 3.0}}, layout, {{1, 1}, {0, 0}, {1, 0}, {0, 1}});
  CHECK(out == std::vector<float>{2.5f, 5.0f, 7.5f, 10.0f});
  // One participant passes its values through unchanged, whatever its weight.
  const std::vector<std::vector<float>> one{{0.1f, -3e-7f, 1e30f, 0.3f}};
  CHECK(aggregate(one, {{0, 12345.0}}, layout, {{0, 1}, {0, 0}}) == one[0]);
  // k equal inputs give that input back exactly.
  std::vector<std::vector<float>> same(7, compression::test::gradient(4, 9));
  std::vector<Participant> seven;
  for (std::uint32_t s = 0; s < 7; ++s) seven.push_back({s, 1.0});
  std::vector<Arrival> order;
  for (std::uint32_t s = 0; s < 7; ++s) order.push_back({s, 0}), order.push_back({s, 1});
  CHECK(aggregate(same, seven, layout, order) == same[0]);
}

TEST_CASE("aggregator: decodes payloads of the job's pipeline and keeps memory to the chunks in flight") {
  auto pipeline = compression::test::make_pipeline({compression::QuantizeSpec{8, 32, compression::Rounding::nearest}});
  const ChunkLayout layout{256, 64};
  auto agg = ChunkAggregator::create(layout, {{0, 1.0}, {1, 1.0}}, 2);
  REQUIRE(agg.ok());
  const auto a = compression::test::gradient(256, 1), b = compression::test::gradient(256, 2);
  auto chunk_payload = [&](const std::vector<float>& v, std::uint64_t c) {
    return compression::test::encode(pipeline, std::vector<float>(v.begin() + c * 64, v.begin() + c * 64 + 64));
  };
  REQUIRE_FALSE(agg->add_payload(0, 0, chunk_payload(a, 0), pipeline)->has_value());
  REQUIRE_FALSE(agg->add_payload(0, 1, chunk_payload(a, 1), pipeline)->has_value());
  CHECK(agg->chunks_in_flight() == 2);
  // A third chunk in flight is over the bound of 2.
  auto over = agg->add_payload(1, 2, chunk_payload(b, 2), pipeline);
  CHECK(over.status().code() == Err::too_large);
  // A replay of a copy already held.
  CHECK(agg->add_payload(0, 1, chunk_payload(a, 1), pipeline).status().code() == Err::mismatch);
  // Completing chunk 0 frees its slots.
  auto done = agg->add_payload(1, 0, chunk_payload(b, 0), pipeline);
  REQUIRE(done.ok());
  REQUIRE(done->has_value());
  const auto da = compression::test::decode(pipeline, chunk_payload(a, 0), 64);
  const auto db = compression::test::decode(pipeline, chunk_payload(b, 0), 64);
  for (std::size_t i = 0; i < 64; ++i) CHECK((**done)[i] == static_cast<float>(0.5 * da[i] + 0.5 * db[i]));
  CHECK(agg->chunks_in_flight() == 1);
  // A chunk already reduced is a replay.
  CHECK_THAT(agg->add_payload(0, 0, chunk_payload(a, 0), pipeline).status().message(),
             Catch::Contains("already reduced"));
  // A payload with the wrong element count changes nothing.
  auto wrong = compression::test::encode(pipeline, std::vector<float>(32, 1.0f));
  CHECK(agg->add_payload(1, 1, wrong, pipeline).status().code() == Err::mismatch);
  CHECK(agg->chunks_in_flight() == 1);
  // Unknown site, chunk out of range.
  CHECK_THAT(agg->add_payload(9, 1, chunk_payload(b, 1), pipeline).status().message(),
             Catch::Contains("site 9 is not a participant"));
  CHECK(agg->add_payload(1, 4, chunk_payload(b, 1), pipeline).status().code() == Err::invalid_argument);
}

TEST_CASE("aggregator: construction refuses rounds that cannot be aggregated") {
  const ChunkLayout layout{10, 4};
  CHECK_THAT(ChunkAggregator::create(layout, {}).status().message(), Catch::Contains("at least one participant"));
  CHECK_THAT(ChunkAggregator::create(layout, {{0, 0.0}}).status().message(), Catch::Contains("finite and > 0"));
  CHECK_THAT(ChunkAggregator::create(layout, {{0, 1.0}, {0, 2.0}}).status().message(), Catch::Contains("listed twice"));
  CHECK_THAT(ChunkAggregator::create({0, 4}, {{0, 1.0}}).status().message(), Catch::Contains("at least one value"));
}

TEST_CASE("aggregator: the squared norm is summed per chunk in chunk order") {
  const ChunkLayout layout{5, 2};
  const std::vector<std::vector<float>> inputs{{1, 2, 3, 4, 5}};
  auto agg = ChunkAggregator::create(layout, {{0, 1.0}});
  REQUIRE(agg.ok());
  for (std::uint64_t c : {2u, 0u, 1u})
    REQUIRE(agg->add_decoded(0, c, std::span<const float>(inputs[0]).subspan(c * 2, layout.length(c))).ok());
  CHECK(agg->squared_norm() == 55.0);
}
