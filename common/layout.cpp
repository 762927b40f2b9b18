#include "common/layout.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

namespace geoloco {

std::uint64_t TensorDesc::size() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<std::uint64_t>::max() / d) return std::numeric_limits<std::uint64_t>::max();
    n *= d;
  }
  return n;
}

std::uint64_t layout_values(const Layout& layout) {
  return layout.empty() ? 0 : layout.back().offset + layout.back().size();
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Status check_layout(const Layout& layout) {
  GEOLOCO_RETURN_IF(layout.empty(), Err::invalid_argument, "the layout has no tensors");
  std::unordered_set<std::string> names;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const auto& t = layout[i];
    GEOLOCO_RETURN_IF(t.name.empty(), Err::invalid_argument, "tensor ", i, " has an empty name");
    GEOLOCO_RETURN_IF(std::any_of(t.name.begin(), t.name.end(),
                                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }),
                      Err::invalid_argument, "tensor ", i, "'s name contains a control character");
    GEOLOCO_RETURN_IF(!names.insert(t.name).second, Err::invalid_argument, "tensor name '", t.name, "' appears twice");
    GEOLOCO_RETURN_IF(std::find(t.shape.begin(), t.shape.end(), 0u) != t.shape.end(), Err::invalid_argument, "tensor '",
                      t.name, "' has shape ", shape_text(t.shape), " with a zero dimension");
    const std::uint64_t n = t.size();  // saturates, so the bound below also catches overflow
    GEOLOCO_RETURN_IF(n > kMaxLayoutValues || at > kMaxLayoutValues - n, Err::invalid_argument, "the layout passes ",
                      kMaxLayoutValues, " values at tensor '", t.name, "'");
    GEOLOCO_RETURN_IF(t.offset != at, Err::invalid_argument, "tensor '", t.name, "' is at offset ", t.offset,
                      " but the previous tensors end at ", at,
                      " (tensors lie contiguously in layout order in one flat fp32 buffer)");
    at += n;
  }
  return {};
}

const TensorDesc* find_tensor(const Layout& layout, std::string_view name) {
  for (const auto& t : layout)
    if (t.name == name) return &t;
  return nullptr;
}

Layout layout_for(std::uint64_t values, const Layout& known) {
  if (!known.empty() && layout_values(known) == values) return known;
  return {TensorDesc{"parameters", {values}, 0}};
}

}  // namespace geoloco
