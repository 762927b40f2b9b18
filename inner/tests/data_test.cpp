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
