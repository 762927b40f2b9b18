// The one parameter layout: its size, a tensor by name, and the flat layout
// a buffer of unknown tensors gets. (Its rules are checked value by value in
// inner/protocol/tests/layout_test.cpp, where HELLO's layouts are refused.)
#include <catch2/catch.hpp>
#include <limits>

#include "common/layout.h"

using namespace geoloco;

TEST_CASE("a layout's values, a tensor found by name, and the flat layout of unknown tensors") {
  const Layout mlp{{"fc1.weight", {4, 6}, 0}, {"fc1.bias", {4}, 24}, {"fc2.weight", {3, 4}, 28}, {"fc2.bias", {3}, 40}};
  REQUIRE(check_layout(mlp).ok());
  CHECK(layout_values(mlp) == 43);
  CHECK(layout_values({}) == 0);
  REQUIRE(find_tensor(mlp, "fc2.weight") != nullptr);
  CHECK(find_tensor(mlp, "fc2.weight")->offset == 28);
  CHECK(find_tensor(mlp, "fc3") == nullptr);
  CHECK(shape_text({3, 4}) == "[3, 4]");
  CHECK(TensorDesc{"x", {1ull << 40, 1ull << 40}, 0}.size() == std::numeric_limits<std::uint64_t>::max());

  CHECK(layout_for(43, mlp) == mlp);  // the known layout, when it adds up
  CHECK(layout_for(44, mlp) == Layout{{"parameters", {44}, 0}});
  CHECK(layout_for(7) == Layout{{"parameters", {7}, 0}});
  CHECK(check_layout(layout_for(7)).ok());
}
