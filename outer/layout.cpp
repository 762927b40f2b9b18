#include "outer/layout.h"

#include <set>

namespace geoloco::outer {

std::uint64_t total_size(const std::vector<TensorInfo>& layout) {
  std::uint64_t n = 0;
  for (const auto& t : layout) n += t.size();
  return n;
}

Status validate_layout(const std::vector<TensorInfo>& layout) {
  // 2^40 fp32 values = 4 TiB: far beyond any single job, small enough that
  // products and sums of sizes cannot overflow 64 bits while we check them.
  constexpr std::uint64_t kMaxValues = 1ull << 40;
  std::set<std::string> seen;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const auto& t = layout[i];
    GEOLOCO_RETURN_IF(t.name.empty(), Err::invalid_argument, "layout: tensor ", i, " has an empty name");
    for (char c : t.name) {
      GEOLOCO_RETURN_IF(static_cast<unsigned char>(c) < 0x20, Err::invalid_argument, "layout: tensor name '",
                        t.name, "' contains a control character");
    }
    GEOLOCO_RETURN_IF(!seen.insert(t.name).second, Err::invalid_argument, "layout: tensor name '", t.name,
                      "' appears twice; names must be unique");
    std::uint64_t n = 1;
    for (auto d : t.shape) {
      GEOLOCO_RETURN_IF(d == 0, Err::invalid_argument, "layout: tensor '", t.name,
                        "' has a zero dimension; every tensor must hold at least one value");
      GEOLOCO_RETURN_IF(d > kMaxValues || n > kMaxValues / d, Err::invalid_argument, "layout: tensor '", t.name,
                        "' is larger than 2^40 values");
      n *= d;
    }
    total += n;
    GEOLOCO_RETURN_IF(total > kMaxValues, Err::invalid_argument, "layout: the model is larger than 2^40 values");
  }
  return {};
}

}  // namespace geoloco::outer
