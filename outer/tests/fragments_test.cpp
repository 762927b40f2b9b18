#include "outer/fragments.h"

#include <catch2/catch.hpp>
#include <map>

using namespace geoloco;
using namespace geoloco::outer;

namespace {
std::vector<TensorInfo> model() {
  // An uneven model: embeddings, blocks, a head.
  return {{"embed", {1000, 16}}, {"b0.attn", {16, 48}}, {"b0.mlp", {16, 64}}, {"b1.attn", {16, 48}},
          {"b1.mlp", {16, 64}},  {"norm", {16}},         {"head", {16, 1000}}, {"bias", {}}};
}
}  // namespace

TEST_CASE("fragments: every parameter belongs to exactly one fragment, cut at tensor boundaries") {
  const auto layout = model();
  const std::uint64_t total = total_size(layout);
  for (std::uint32_t count = 1; count <= layout.size(); ++count) {
    auto frags = partition_fragments(layout, count);
    REQUIRE(frags.ok());
    REQUIRE(frags->size() == count);
    std::vector<int> owner(total, 0);
    std::uint32_t next_tensor = 0;
    std::uint64_t next_offset = 0;
    for (const auto& f : *frags) {
      CHECK(f.tensor_count >= 1);
      CHECK(f.first_tensor == next_tensor);
      CHECK(f.offset == next_offset);
      std::uint64_t len = 0;
      for (std::uint32_t t = f.first_tensor; t < f.first_tensor + f.tensor_count; ++t) len += layout[t].size();
      CHECK(f.length == len);  // whole tensors only
      for (std::uint64_t i = f.offset; i < f.offset + f.length; ++i) ++owner[i];
      next_tensor += f.tensor_count;
      next_offset += f.length;
    }
    CHECK(next_tensor == layout.size());
    CHECK(std::all_of(owner.begin(), owner.end(), [](int c) { return c == 1; }));
  }
  // Two fragments: the first runs to the first boundary at or past half of
  // 35601 values: embed + b0 (17792) is short of 17800, so b1.attn joins it.
  auto two = partition_fragments(layout, 2);
  CHECK((*two)[0].tensor_count == 4);
  CHECK((*two)[0].length == 18560);
  CHECK((*two)[1].length == 17041);
}

TEST_CASE("fragments: each fragment syncs exactly once every H steps, at offset f*H/F") {
  for (std::uint64_t h : {1u, 4u, 7u, 30u}) {
    for (std::uint32_t f_count : {1u, 2u, 3u, 5u}) {
      std::map<std::uint32_t, std::vector<std::uint64_t>> syncs;
      for (std::uint64_t step = 1; step <= 10 * h; ++step)
        for (auto f : fragments_due(step, f_count, h)) syncs[f].push_back(step);
      REQUIRE(syncs.size() == f_count);
      for (std::uint32_t f = 0; f < f_count; ++f) {
        const auto& s = syncs[f];
        const std::uint64_t offset = fragment_offset(f, f_count, h);
        CHECK(offset == f * h / f_count);
        // The first sync: at the offset, or after a full period for offset 0.
        CHECK(s.front() == (offset == 0 ? h : offset));
        for (std::size_t k = 1; k < s.size(); ++k) CHECK(s[k] - s[k - 1] == h);
        // Any window of H consecutive steps holds exactly one sync of f.
        for (std::uint64_t start = 1; start + h - 1 <= 10 * h; ++start) {
          const auto n = std::count_if(s.begin(), s.end(), [&](auto x) { return x >= start && x < start + h; });
          REQUIRE(n == 1);
        }
      }
    }
  }
  // H = 8, F = 4: fragments at steps 8, 2, 4, 6 of each period.
  CHECK(fragments_due(2, 4, 8) == std::vector<std::uint32_t>{1});
  CHECK(fragments_due(16, 4, 8) == std::vector<std::uint32_t>{0});
  CHECK(fragments_due(3, 4, 8).empty());
  CHECK(fragments_due(0, 4, 8).empty());
}

TEST_CASE("fragments: merge mixes local and global by alpha") {
  std::vector<float> local{1.0f, 2.0f, -4.0f};
  const std::vector<float> global{3.0f, 2.0f, 4.0f};
  REQUIRE(merge_fragment(local, global, 0.5).ok());
  CHECK(local == std::vector<float>{2.0f, 2.0f, 0.0f});
  REQUIRE(merge_fragment(local, global, 0.0).ok());
  CHECK(local == global);  // α = 0: plain DiLoCo, the replica restarts from the anchor
  std::vector<float> keep{9.0f, 9.0f, 9.0f};
  REQUIRE(merge_fragment(keep, global, 1.0).ok());
  CHECK(keep == std::vector<float>{9.0f, 9.0f, 9.0f});
  CHECK_THAT(merge_fragment(keep, global, 1.5).message(), Catch::Contains("alpha must be in [0, 1]"));
  std::vector<float> short_local{1.0f};
  CHECK(merge_fragment(short_local, global, 0.5).code() == Err::invalid_argument);
}

TEST_CASE("fragments: options and layouts that break a rule are refused") {
  StreamingOptions o;
  o.overlap_steps = 10;
  CHECK_THAT(o.validate(10).message(), Catch::Contains("streaming.overlap (10) must be smaller than inner.steps H (10)"));
  CHECK(o.validate(11).ok());
  o.fragments = 0;
  CHECK_THAT(o.validate(11).message(), Catch::Contains("streaming.fragments must be at least 1"));
  o = {};
  o.alpha = -0.1;
  CHECK_THAT(o.validate(5).message(), Catch::Contains("streaming.alpha"));
  CHECK_THAT(partition_fragments(model(), 9).status().message(), Catch::Contains("exceeds the number of tensors (8)"));
  CHECK_THAT(partition_fragments({{"a", {3}}, {"a", {2}}}, 1).status().message(), Catch::Contains("appears twice"));
  CHECK_THAT(partition_fragments({{"a", {3, 0}}}, 1).status().message(), Catch::Contains("zero dimension"));
}
