#include "compression/topk_codec.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <vector>

#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

namespace {
struct Selected {
  std::vector<std::byte> indices;
  std::vector<float> values;
};

Selected select(const TopkCodec& c, const std::vector<float>& in) {
  Selected s;
  s.indices.resize(c.max_index_bytes(in.size()));
  s.values.resize(c.kept_count(in.size()));
  auto size = c.select(in, s.indices, s.values);
  REQUIRE(size.ok());
  s.indices.resize(*size);
  return s;
}

// The reference: sort a block's indices by (|x| descending, index ascending)
// and take the first k.
std::vector<std::size_t> reference_kept(const std::vector<float>& in, std::size_t block, const TopkCodec& c) {
  std::vector<std::size_t> kept;
  for (std::size_t b = 0; b < in.size(); b += block) {
    const std::size_t len = std::min(block, in.size() - b);
    std::vector<std::size_t> idx(len);
    std::iota(idx.begin(), idx.end(), b);
    std::stable_sort(idx.begin(), idx.end(), [&](auto x, auto y) { return std::fabs(in[x]) > std::fabs(in[y]); });
    idx.resize(c.kept_in_block(len));
    std::sort(idx.begin(), idx.end());
    kept.insert(kept.end(), idx.begin(), idx.end());
  }
  return kept;
}
}  // namespace

TEST_CASE("topk keeps exactly the k largest magnitudes of every block") {
  auto block = GENERATE(8u, 100u, 4096u);
  auto density = GENERATE(0.01, 0.1, 0.5);
  auto n = GENERATE(std::size_t{1}, std::size_t{5000}, std::size_t{20000});
  auto c = TopkCodec::from_spec(TopkSpec{density, block});
  auto in = test::gradient(n, block + n);
  auto sel = select(c, in);
  auto expected = reference_kept(in, block, c);
  REQUIRE(sel.values.size() == expected.size());

  std::vector<float> out(n);
  REQUIRE(c.scatter(sel.indices, sel.values, out).ok());
  std::vector<float> want(n, 0.0f);
  for (auto i : expected) want[i] = in[i];
  CHECK(out == want);
}

TEST_CASE("topk breaks ties toward the lower index and handles zeros") {
  TopkCodec c(8, 3);
  std::vector<float> in{0, 2, -2, 0, 2, 1, -2, 0};  // four values of magnitude 2
  auto sel = select(c, in);
  CHECK(sel.values == std::vector<float>{2, -2, 2});
  std::vector<float> all_zero(8, 0.0f);
  auto z = select(c, all_zero);
  std::vector<float> out(8, 5.0f);
  REQUIRE(c.scatter(z.indices, z.values, out).ok());
  CHECK(out == all_zero);
}

TEST_CASE("topk k per block: ceil(density * block), and proportionally for a short last block") {
  CHECK(TopkCodec::from_spec(TopkSpec{0.01, 4096}).k() == 41);
  CHECK(TopkCodec::from_spec(TopkSpec{0.02, 50}).k() == 1);
  CHECK(TopkCodec::from_spec(TopkSpec{0.0001, 100}).k() == 1);
  TopkCodec c(4096, 41);
  CHECK(c.kept_count(4096 * 3) == 123);
  CHECK(c.kept_count(4096 + 100) == 41 + 2);  // ceil(41 * 100 / 4096) = 2
  CHECK(c.kept_count(4096 + 99) == 41 + 1);
  CHECK(c.kept_count(4096 + 2048) == 41 + 21);
  CHECK(c.kept_in_block(1) == 1);
}

TEST_CASE("topk with density 1 is lossless") {
  auto c = TopkCodec::from_spec(TopkSpec{1.0, 64});
  auto in = test::gradient(1000);
  auto sel = select(c, in);
  std::vector<float> out(in.size());
  REQUIRE(c.scatter(sel.indices, sel.values, out).ok());
  CHECK(out == in);
}

TEST_CASE("topk scatter refuses indices out of range, short, or with bytes left over") {
  TopkCodec c(8, 2);
  std::vector<float> values{1.0f, 2.0f};
  std::vector<float> out(8);
  auto bytes = [](std::initializer_list<int> v) {
    std::vector<std::byte> b;
    for (int x : v) b.push_back(std::byte(x));
    return b;
  };
  CHECK(c.scatter(bytes({1, 2}), values, out).ok());  // indices 1 and 4
  CHECK(out[1] == 1.0f);
  CHECK(out[4] == 2.0f);
  CHECK(c.scatter(bytes({1, 6}), values, out).code() == Err::malformed);     // index 8 of 8
  CHECK(c.scatter(bytes({1}), values, out).code() == Err::malformed);        // ends early
  CHECK(c.scatter(bytes({1, 2, 0}), values, out).code() == Err::malformed);  // left over
  CHECK(c.scatter(bytes({0x80, 0x80}), values, out).code() == Err::malformed);
  CHECK(c.scatter(bytes({1, 2}), std::vector<float>{1.0f}, out).code() == Err::mismatch);
}
