// The exchange's arithmetic against values computed by hand: the cut, the
// seeds, the contribution and the weighted sum.
#include "diloco/exchange.h"

#include <catch2/catch.hpp>
#include <set>

using namespace geoloco::diloco;

TEST_CASE("exchange: shards cover the tensor in order, chunks cover each shard") {
  // 10 values among 3 participants: [0, 3), [3, 6), [6, 10).
  CHECK((shard_range(10, 3, 0).begin == 0 && shard_range(10, 3, 0).size == 3));
  CHECK((shard_range(10, 3, 1).begin == 3 && shard_range(10, 3, 1).size == 3));
  CHECK((shard_range(10, 3, 2).begin == 6 && shard_range(10, 3, 2).size == 4));
  const Range shard{6, 4};
  CHECK(chunks_in(shard, 3) == 2);
  CHECK((chunk_range(shard, 0, 3).begin == 6 && chunk_range(shard, 0, 3).size == 3));
  CHECK((chunk_range(shard, 1, 3).begin == 9 && chunk_range(shard, 1, 3).size == 1));
  CHECK(chunks_in(Range{0, 0}, 3) == 0);
}

TEST_CASE("exchange: every encode of a round has its own seed, the same on every attempt to replay it") {
  std::set<std::uint64_t> seen;
  for (std::size_t site = 0; site < 3; ++site)
    for (std::size_t shard = 0; shard < 3; ++shard)
      for (std::uint64_t c = 0; c < 4; ++c)
        for (int phase : {1, 2}) seen.insert(encode_seed(7, 5, 0, site, shard, c, phase));
  CHECK(seen.size() == 3 * 3 * 4 * 2);
  CHECK(encode_seed(7, 5, 0, 1, 2, 3, 1) == encode_seed(7, 5, 0, 1, 2, 3, 1));
  CHECK(encode_seed(7, 5, 0, 1, 2, 3, 1) != encode_seed(7, 5, 1, 1, 2, 3, 1));  // another attempt
  CHECK(encode_seed(7, 5, 0, 1, 2, 3, 1) != encode_seed(8, 5, 0, 1, 2, 3, 1));  // another job seed
}

TEST_CASE("exchange: the contribution is the input, or base minus input, one chunk at a time") {
  const std::vector<float> input{1.0f, 2.0f, 3.0f, 4.0f}, base{1.5f, 2.0f, 2.0f, 8.0f};
  std::vector<float> scratch;
  auto plain = contribution(input, {}, Range{1, 2}, scratch);
  CHECK(std::vector<float>(plain.begin(), plain.end()) == std::vector<float>{2.0f, 3.0f});
  auto delta = contribution(input, base, Range{1, 3}, scratch);
  CHECK(std::vector<float>(delta.begin(), delta.end()) == std::vector<float>{0.0f, -1.0f, 4.0f});
}

TEST_CASE("exchange: the weighted sum is fp32 with fp32 shares, participant after participant") {
  const std::vector<double> weights{1, 2, 3};
  const auto shares = normalized_weights(weights);
  REQUIRE(shares.size() == 3);
  CHECK(shares[0] == static_cast<float>(1.0 / 6.0));
  CHECK(shares[2] == 0.5f);
  std::vector<float> sum(2, 0.0f);
  const std::vector<std::vector<float>> values{{6.0f, 1.0f}, {3.0f, 1.0f}, {2.0f, 1.0f}};
  for (std::size_t s = 0; s < 3; ++s) add_weighted(sum, values[s], shares[s]);
  float expect0 = 0.0f, expect1 = 0.0f;
  for (std::size_t s = 0; s < 3; ++s) {
    expect0 = expect0 + shares[s] * values[s][0];
    expect1 = expect1 + shares[s] * values[s][1];
  }
  CHECK(sum[0] == expect0);
  CHECK(sum[1] == expect1);
  // The order matters in fp32, which is why it is fixed: 1e8 + 1 − 1e8.
  std::vector<float> a(1, 0.0f), b(1, 0.0f);
  const std::vector<float> big{1e8f}, one{1.0f}, minus{-1e8f};
  add_weighted(a, big, 1.0f), add_weighted(a, one, 1.0f), add_weighted(a, minus, 1.0f);
  add_weighted(b, big, 1.0f), add_weighted(b, minus, 1.0f), add_weighted(b, one, 1.0f);
  CHECK(a[0] == 0.0f);
  CHECK(b[0] == 1.0f);
}
