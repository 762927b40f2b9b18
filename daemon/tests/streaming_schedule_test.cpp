// geolocod's streaming rounds (inner/protocol/streaming_schedule.h) against
// the outer loop's definition of Streaming DiLoCo (outer/fragments.h), which
// geoloco simulate runs: the same fragment syncs after the same step, and
// the trainer's fragment table cuts the model where the outer loop does.
#include <catch2/catch.hpp>

#include "inner/protocol/layout.h"
#include "inner/protocol/streaming_schedule.h"
#include "outer/fragments.h"

using namespace geoloco;
namespace protocol = geoloco::inner::protocol;

TEST_CASE("round k syncs the fragment that the outer loop says is due after its step") {
  for (std::uint32_t f = 1; f <= 5; ++f)
    for (std::uint64_t h = f; h <= 24; ++h) {
      INFO("F " << f << ", H " << h);
      std::uint64_t prev = 0;
      for (std::uint64_t k = 1; k <= 4 * f; ++k) {
        const std::uint64_t step = protocol::steps_through_round(k, f, h);
        CHECK(step > prev);  // every round has at least one step
        prev = step;
        const auto due = outer::fragments_due(step, f, h);
        REQUIRE(due.size() == 1);
        CHECK(due[0] == protocol::fragment_of_round(k, f));
      }
      CHECK(protocol::steps_through_round(f, f, h) == h);  // F rounds make one period
    }
}

TEST_CASE("the trainer's fragment table and the outer loop cut a layout alike") {
  const std::vector<std::vector<std::uint64_t>> sizes{{5, 3, 9, 1, 1, 7}, {100, 1, 1, 1}, {2, 2, 2, 2, 2, 2, 2}};
  for (const auto& s : sizes) {
    std::vector<outer::TensorInfo> outer_layout;
    protocol::Layout layout;
    std::uint64_t offset = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      std::string name = "t";
      name += std::to_string(i);  // (GCC 12 -Wrestrict misfires on "t" + std::to_string(i))
      outer_layout.push_back({name, {s[i]}});
      protocol::TensorDesc d;
      d.name = name;
      d.shape = {s[i]};
      d.offset = offset;
      offset += s[i];
      layout.push_back(d);
    }
    for (std::uint32_t f = 1; f <= s.size(); ++f) {
      auto a = outer::partition_fragments(outer_layout, f);
      auto b = protocol::split_fragments(layout, f, 1);
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      REQUIRE(a->size() == b->size());
      for (std::size_t k = 0; k < a->size(); ++k) {
        CHECK((*a)[k].offset == (*b)[k].offset);
        CHECK((*a)[k].length == (*b)[k].length);
      }
    }
  }
}
