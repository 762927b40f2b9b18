// The pure rules of the protocol: layouts, their comparison, fragment tables,
// and the session decisions (check_sync, check_finite, check_completion).
// Each refusal is checked by its message, since users read them.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "inner/protocol/layout.h"
#include "inner/protocol/tests/mlp_layout.h"
#include "inner/protocol/session_rules.h"

using namespace geoloco;
using namespace geoloco::inner::protocol;
using geoloco::inner::protocol::testing::mlp;

TEST_CASE("a contiguous layout passes and every broken rule is named", "[sanitize]") {
  CHECK(check_layout(mlp()).ok());
  CHECK(layout_values(mlp()) == 43);
  CHECK(check_layout({{"scalar", {}, 0}}).ok());  // an empty shape is one value

  auto broken = [](auto edit) {
    Layout l = mlp();
    edit(l);
    Status s = check_layout(l);
    CHECK(s.code() == Err::invalid_argument);
    return s.message();
  };
  CHECK_THAT(broken([](Layout& l) { l.clear(); }), Catch::Contains("no tensors"));
  CHECK_THAT(broken([](Layout& l) { l[1].name = ""; }), Catch::Contains("tensor 1 has an empty name"));
  CHECK_THAT(broken([](Layout& l) { l[1].name = "a\nb"; }), Catch::Contains("control character"));
  CHECK_THAT(broken([](Layout& l) { l[2].name = "fc1.weight"; }), Catch::Contains("'fc1.weight' appears twice"));
  CHECK_THAT(broken([](Layout& l) { l[0].shape = {4, 0}; }), Catch::Contains("shape [4, 0] with a zero dimension"));
  CHECK_THAT(broken([](Layout& l) { l[2].offset = 30; }),
             Catch::Contains("'fc2.weight' is at offset 30 but the previous tensors end at 28"));
  CHECK_THAT(broken([](Layout& l) { l[0].shape = {1ull << 40, 1ull << 40}; }), Catch::Contains("passes"));
}

TEST_CASE("layout comparison names the first difference", "[sanitize]") {
  CHECK(compare_layouts(mlp(), mlp()).ok());
  Layout swapped = mlp();
  swapped[2].shape = {4, 3};
  Status s = compare_layouts(mlp(), swapped);
  CHECK(s.code() == Err::mismatch);
  CHECK(s.message() == "tensor 2 ('fc2.weight'): the job expects shape [3, 4], the trainer sent [4, 3]");
  Layout renamed = mlp();
  renamed[0].name = "embed";
  CHECK(compare_layouts(mlp(), renamed).message() ==
        "tensor 0: the job expects 'fc1.weight', the trainer sent 'embed'");
  Layout shorter = mlp();
  shorter.pop_back();
  CHECK(compare_layouts(mlp(), shorter).message() ==
        "the job expects 4 tensors (43 values), the trainer sent 3 (40 values)");
}

TEST_CASE("fragment tables must cover the segment along tensor boundaries", "[sanitize]") {
  std::vector<FragmentDesc> good = {{0, 28, 0}, {28, 15, 0}};
  CHECK(check_fragments(good, mlp()).ok());
  CHECK_THAT(check_fragments({}, mlp()).message(), Catch::Contains("empty"));
  std::vector<FragmentDesc> cut = {{0, 20, 0}, {20, 23, 0}};
  CHECK_THAT(check_fragments(cut, mlp()).message(), Catch::Contains("fragment 1 starts at 20, inside a tensor"));
  std::vector<FragmentDesc> gap = {{0, 24, 0}, {28, 15, 0}};
  CHECK_THAT(check_fragments(gap, mlp()).message(), Catch::Contains("fragment 1 starts at 28 but the previous"));
  std::vector<FragmentDesc> short_cover = {{0, 28, 0}};
  CHECK_THAT(check_fragments(short_cover, mlp()).message(), Catch::Contains("cover 28 of the 43 values"));
  std::vector<FragmentDesc> past = {{0, 44, 0}};
  CHECK_THAT(check_fragments(past, mlp()).message(), Catch::Contains("ends past the 43 values"));
}

TEST_CASE("split_fragments cuts at the first tensor boundary past each share", "[sanitize]") {
  auto one = split_fragments(mlp(), 1, 7);
  REQUIRE(one.ok());
  CHECK(*one == std::vector<FragmentDesc>{{0, 43, 7}});
  // Shares of 43/2 = 21: fc1.weight ends at 24 >= 21, so fragment 0 is that tensor.
  auto two = split_fragments(mlp(), 2, 0);
  REQUIRE(two.ok());
  CHECK(*two == std::vector<FragmentDesc>{{0, 24, 0}, {24, 19, 0}});
  auto four = split_fragments(mlp(), 4, 0);
  REQUIRE(four.ok());
  CHECK(four->size() == 4);
  CHECK(check_fragments(*four, mlp()).ok());
  CHECK_THAT(split_fragments(mlp(), 5, 0).status().message(), Catch::Contains("cannot cut 4 tensors into 5"));
  CHECK(split_fragments(mlp(), 0, 0).status().code() == Err::invalid_argument);
}

TEST_CASE("the welcome table: every fragment due at the next round, or with streaming at the round that syncs it",
          "[sanitize]") {
  auto plain = welcome_table(mlp(), 1, 5, false);
  REQUIRE(plain.ok());
  CHECK(*plain == std::vector<FragmentDesc>{{0, 43, 5}});
  // Four fragments take turns, round k syncing fragment k mod 4: rounds 4 and 8 fragment 0, round 5 fragment 1, ...
  auto streaming = welcome_table(mlp(), 4, 5, true);
  REQUIRE(streaming.ok());
  REQUIRE(streaming->size() == 4);
  std::vector<std::uint64_t> due;
  for (const auto& f : *streaming) due.push_back(f.next_round);
  CHECK(due == std::vector<std::uint64_t>{8, 5, 6, 7});
  auto later = welcome_table(mlp(), 4, 7, true);
  REQUIRE(later.ok());
  due.clear();
  for (const auto& f : *later) due.push_back(f.next_round);
  CHECK(due == std::vector<std::uint64_t>{8, 9, 10, 7});
  CHECK(welcome_table(mlp(), 5, 1, true).status().code() == Err::invalid_argument);
}

TEST_CASE("check_sync accepts only the due round of an idle, existing fragment", "[sanitize]") {
  std::vector<FragmentState> f = {{{0, 24, 5}, false}, {{24, 19, 4}, true}};
  CHECK(check_sync(SyncMsg{5, 0, 10, 1.0}, f).ok());
  Status round = check_sync(SyncMsg{6, 0, 10, 1.0}, f);
  CHECK(round.code() == Err::mismatch);
  CHECK(round.message() == "SYNC is for round 6 but fragment 0 is due for round 5; the trainer is not in round 6");
  Status busy = check_sync(SyncMsg{4, 1, 10, 1.0}, f);
  CHECK_THAT(busy.message(), Catch::Contains("fragment 1 of round 4 is already being synchronized"));
  Status unknown = check_sync(SyncMsg{5, 2, 10, 1.0}, f);
  CHECK(unknown.code() == Err::invalid_argument);
  CHECK(unknown.message() == "SYNC names fragment 2 but the job has 2 fragment(s)");
}

TEST_CASE("check_finite names the tensor and index of the first bad value", "[sanitize]") {
  std::vector<float> v(19, 1.0f);
  CHECK(check_finite(v, 24, mlp()).ok());
  v[6] = std::numeric_limits<float>::quiet_NaN();  // value 30: fc2.weight index 2
  Status s = check_finite(v, 24, mlp());
  CHECK(s.code() == Err::non_finite);
  CHECK_THAT(s.message(), Catch::Contains("tensor 'fc2.weight' has a NaN value at index 2"));
  v[6] = 1.0f;
  v[18] = -std::numeric_limits<float>::infinity();
  CHECK_THAT(check_finite(v, 24, mlp()).message(), Catch::Contains("'fc2.bias' has an infinite value at index 2"));
}

TEST_CASE("check_completion guards the daemon's answers", "[sanitize]") {
  std::vector<FragmentState> f = {{{0, 24, 5}, true}, {{24, 19, 4}, false}};
  CHECK(check_completion(0, f, 24, 6).ok());
  CHECK_THAT(check_completion(1, f, 19, 5).message(), Catch::Contains("fragment 1 has no SYNC to answer"));
  CHECK_THAT(check_completion(0, f, 23, 6).message(), Catch::Contains("has 23 values; the fragment has 24"));
  CHECK_THAT(check_completion(0, f, 24, 5).message(), Catch::Contains("next round 5 does not come after"));
  CHECK_THAT(check_completion(2, f, 24, 6).message(), Catch::Contains("fragment 2 does not exist"));
}
