// Data order and sharding: deterministic from the seed, shards disjoint and
// covering, epochs visit every item once; the text split and its windows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "inner/data/sampler.h"
#include "inner/data/text.h"

using namespace geoloco;
using namespace geoloco::inner;

TEST_CASE("sampler: shards are disjoint and cover the items; order is deterministic", "[data]") {
  std::set<std::size_t> seen;
  for (std::size_t shard = 0; shard < 3; ++shard) {
    auto s = Sampler::create(100, shard, 3, 7, true);
    REQUIRE(s.ok());
    std::vector<std::size_t> items;
    s->next(s->end() - s->begin(), items);  // one epoch
    std::set<std::size_t> epoch(items.begin(), items.end());
    CHECK(epoch.size() == items.size());  // each item once per epoch
    for (std::size_t i : items) {
      CHECK(i >= s->begin());
      CHECK(i < s->end());
      CHECK(seen.insert(i).second);  // no other shard had it
    }
  }
  CHECK(seen.size() == 100);

  auto a = Sampler::create(1000, 1, 4, 9, true), b = Sampler::create(1000, 1, 4, 9, true),
       c = Sampler::create(1000, 1, 4, 10, true);
  std::vector<std::size_t> x, y, z;
  a->next(600, x);  // crosses into the third epoch
  b->next(600, y);
  c->next(600, z);
  CHECK(x == y);
  CHECK(x != z);
  CHECK(a->epoch() == 2);
  // Consecutive epochs are different permutations.
  CHECK(!std::equal(x.begin(), x.begin() + 250, x.begin() + 250));

  auto u = Sampler::create(50, 0, 2, 1, false);
  u->next(200, x);
  CHECK(*std::max_element(x.begin(), x.end()) < 25);

  CHECK(Sampler::create(10, 3, 3, 1, true).status().code() == Err::invalid_argument);
  CHECK(Sampler::create(2, 0, 3, 1, true).status().message().find("leave shard 0 empty") != std::string::npos);
}

TEST_CASE("sampler: the interleaved split keeps shards disjoint and covering, each spread over all the items",
          "[data]") {
  CHECK(parse_data_split("interleaved") == DataSplit::interleaved);
  CHECK(parse_data_split("contiguous") == DataSplit::contiguous);
  CHECK_FALSE(parse_data_split("random"));
  for (std::size_t n : {100u, 97u, 1000u, 3600u}) {
    INFO("items " << n);
    std::set<std::size_t> seen;
    for (std::size_t shard = 0; shard < 4; ++shard) {
      auto s = Sampler::create(n, shard, 4, 7, true, DataSplit::interleaved);
      REQUIRE(s.ok());
      std::vector<std::size_t> items;
      s->next(s->end() - s->begin(), items);  // one epoch: every item of the shard once
      std::size_t tenths[10] = {};
      for (std::size_t i : items) {
        CHECK(i < n);
        CHECK(seen.insert(i).second);  // no other shard, and no earlier draw, had it
        ++tenths[i * 10 / n];
      }
      // Spread: every tenth of the data holds some of the shard and at most
      // twice its share (a contiguous shard leaves 7 or more tenths empty).
      for (std::size_t t = 0; t < 10; ++t) {
        INFO("shard " << shard << " tenth " << t);
        CHECK(tenths[t] >= 1);
        CHECK(tenths[t] * 10 <= 2 * items.size());
      }
    }
    CHECK(seen.size() == n);
  }
  // Draws with replacement stay inside the shard's (spread) items, and the
  // same seed gives the same items on every site.
  auto u = Sampler::create(1000, 2, 4, 3, false, DataSplit::interleaved);
  auto v = Sampler::create(1000, 2, 4, 3, false, DataSplit::interleaved);
  auto e = Sampler::create(1000, 2, 4, 3, true, DataSplit::interleaved);
  std::vector<std::size_t> x, y, shard_items;
  u->next(500, x);
  v->next(500, y);
  CHECK(x == y);
  e->next(250, shard_items);
  const std::set<std::size_t> allowed(shard_items.begin(), shard_items.end());
  for (std::size_t i : x) CHECK(allowed.count(i) == 1);
  CHECK(*std::max_element(x.begin(), x.end()) >= 900);  // not the contiguous range [500, 750)
  CHECK(*std::min_element(x.begin(), x.end()) < 100);
  CHECK(Sampler::create(std::size_t{1} << 32, 0, 2, 1, false, DataSplit::interleaved)
            .status()
            .message()
            .find("too many to interleave") != std::string::npos);
}

TEST_CASE("text: held-out tail, next-byte targets, non-overlapping eval windows", "[data]") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  auto d = TextDataset::create(text, 4, 0.2);
  REQUIRE(d.ok());
  CHECK((*d)->train_items() == 80 - 4);
  CHECK((*d)->eval_items() == (20 - 1) / 4);
  Batch b;
  std::vector<std::size_t> items = {0, 75};
  (*d)->train_batch(items, b);
  CHECK(b.samples == 2);
  CHECK(b.tokens == std::vector<std::int32_t>{'a', 'b', 'c', 'd', 'x', 'y', 'z', 'a'});
  CHECK(b.targets == std::vector<std::int32_t>{'b', 'c', 'd', 'e', 'y', 'z', 'a', 'b'});
  items = {0, 1};
  (*d)->eval_batch(items, b);
  // The held-out part starts at byte 80 ('c'); window 1 starts 4 bytes later.
  CHECK(b.tokens == std::vector<std::int32_t>{'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'});

  auto tiny = TextDataset::create("abcdef", 4, 0.5);
  CHECK(tiny.status().code() == Err::invalid_argument);
  CHECK(tiny.status().message().find("each part needs at least context + 1 = 5") != std::string::npos);
}
