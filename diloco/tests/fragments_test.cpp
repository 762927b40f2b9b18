// The fragment cut and the merge, against hand-computed values.
#include "diloco/fragments.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>

using namespace geoloco;
using namespace geoloco::diloco;

namespace {
// An uneven model: embeddings, blocks, a head, a scalar.
const std::vector<std::uint64_t> kModel{16000, 768, 1024, 768, 1024, 16, 16000, 1};
}  // namespace

TEST_CASE("fragments: every parameter belongs to exactly one fragment, cut at tensor boundaries") {
  const std::uint64_t total = std::accumulate(kModel.begin(), kModel.end(), std::uint64_t{0});
  for (std::uint32_t count = 1; count <= kModel.size(); ++count) {
    auto frags = cut_fragments(kModel, count);
    REQUIRE(frags.ok());
    REQUIRE(frags->size() == count);
    std::uint32_t next_tensor = 0;
    std::uint64_t next_offset = 0;
    for (const auto& f : *frags) {
      CHECK(f.tensor_count >= 1);
      CHECK(f.first_tensor == next_tensor);
      CHECK(f.offset == next_offset);
      std::uint64_t len = 0;
      for (std::uint32_t t = f.first_tensor; t < f.first_tensor + f.tensor_count; ++t) len += kModel[t];
      CHECK(f.length == len);  // whole tensors only
      next_tensor += f.tensor_count;
      next_offset += f.length;
    }
    CHECK(next_tensor == kModel.size());
    CHECK(next_offset == total);
  }
  // Two fragments: the first runs to the first boundary at or past half of
  // 35601 values: embed + b0 (17792) is short of 17800, so b1.attn joins it.
  auto two = cut_fragments(kModel, 2);
  CHECK((*two)[0].tensor_count == 4);
  CHECK((*two)[0].length == 18560);
  CHECK((*two)[1].length == 17041);
  // As many fragments as tensors: one tensor each, even the scalar.
  auto all = cut_fragments(kModel, 8);
  CHECK((*all)[7].offset == total - 1);
  CHECK((*all)[7].length == 1);
}

TEST_CASE("fragments: a cut that breaks a rule is refused") {
  CHECK_THAT(cut_fragments(kModel, 9).status().message(),
             Catch::Contains("cannot cut 8 tensors into 9 fragments: fragments never cut a tensor"));
  CHECK(cut_fragments(kModel, 0).status().code() == Err::invalid_argument);
  const std::vector<std::uint64_t> empty_tensor{3, 0, 2};
  CHECK(cut_fragments(empty_tensor, 1).status().message() == "tensor 1 holds no values");
}

TEST_CASE("fragments: the delayed merge moves the fragment to the round's values and keeps the progress since") {
  // Synced at 1, 2, 3; trained on to 1.5, 1, 3; the round put the anchor at 4, 4, -1.
  const std::vector<float> at_sync{1.0f, 2.0f, 3.0f};
  std::vector<float> local{1.5f, 1.0f, 3.0f};
  const std::vector<float> global{4.0f, 4.0f, -1.0f};
  REQUIRE(merge_fragment_delayed(local, global, at_sync).ok());
  CHECK(local == std::vector<float>{4.5f, 3.0f, -1.0f});
  // No progress since the sync: the global values exactly (the replacing merge with α = 0).
  std::vector<float> still = at_sync;
  REQUIRE(merge_fragment_delayed(still, global, at_sync).ok());
  CHECK(still == global);
  // In double, rounded once: 2^-24 of progress survives on top of 1 + 2^-23.
  std::vector<float> tiny{1.0f + 0x1p-23f};
  const std::vector<float> base{1.0f};
  const std::vector<float> g{1.0f + 0x1p-23f};
  REQUIRE(merge_fragment_delayed(tiny, g, base).ok());
  CHECK(tiny[0] == static_cast<float>(static_cast<double>(1.0f + 0x1p-23f) + 0x1p-23));
  std::vector<float> short_local{1.0f};
  CHECK(merge_fragment_delayed(short_local, global, at_sync).code() == Err::invalid_argument);

  StreamingOptions o;
  o.delayed = true;
  o.overlap_steps = 29;
  CHECK(o.validate(30).ok());
  o.alpha = 0.5;
  CHECK(o.validate(30).message().find("leave alpha out") != std::string::npos);
}

TEST_CASE("fragments: merge mixes local and global by alpha, in double rounded once") {
  std::vector<float> local{1.0f, 2.0f, -4.0f};
  const std::vector<float> global{3.0f, 2.0f, 4.0f};
  REQUIRE(merge_fragment(local, global, 0.5).ok());
  CHECK(local == std::vector<float>{2.0f, 2.0f, 0.0f});
  REQUIRE(merge_fragment(local, global, 0.0).ok());
  CHECK(local == global);  // α = 0: plain DiLoCo, the replica restarts from the anchor
  std::vector<float> keep{9.0f, 9.0f, 9.0f};
  REQUIRE(merge_fragment(keep, global, 1.0).ok());
  CHECK(keep == std::vector<float>{9.0f, 9.0f, 9.0f});
  // 0.1·1 + 0.9·(1 + 2^-23): in fp32 arithmetic 0.9f·x rounds differently;
  // the double expression rounded once is what every site computes.
  std::vector<float> a{1.0f};
  const std::vector<float> b{1.0f + 0x1p-23f};
  REQUIRE(merge_fragment(a, b, 0.1).ok());
  CHECK(a[0] == static_cast<float>(0.1 * 1.0 + 0.9 * static_cast<double>(1.0f + 0x1p-23f)));
  std::vector<float> odd{1.0f, -2.0f, 0.1f};
  const std::vector<float> zeroes{3.0f, 2.0f, -0.0f};
  REQUIRE(merge_fragment(odd, zeroes, 0.25).ok());
  CHECK(odd == std::vector<float>{2.5f, 1.0f, static_cast<float>(0.25 * static_cast<double>(0.1f))});
  std::vector<float> nan_local{std::nanf(""), 1.0f, 2.0f};
  REQUIRE(merge_fragment(nan_local, zeroes, 0.0).ok());
  CHECK(std::memcmp(nan_local.data(), zeroes.data(), sizeof(float) * 3) == 0);  // α = 0: exact, −0 included
  CHECK_THAT(merge_fragment(keep, global, 1.5).message(), Catch::Contains("alpha must be in [0, 1]"));
  std::vector<float> short_local{1.0f};
  CHECK(merge_fragment(short_local, global, 0.5).code() == Err::invalid_argument);
}

TEST_CASE("fragments: streaming options that break a rule are refused") {
  StreamingOptions o;
  o.overlap_steps = 10;
  CHECK_THAT(o.validate(10).message(),
             Catch::Contains("streaming.overlap (10) must be smaller than inner.steps H (10)"));
  CHECK(o.validate(11).ok());
  o.fragments = 0;
  CHECK_THAT(o.validate(11).message(), Catch::Contains("streaming.fragments must be at least 1"));
  o = {};
  o.alpha = -0.1;
  CHECK_THAT(o.validate(5).message(), Catch::Contains("streaming.alpha"));
}
