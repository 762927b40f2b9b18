// Layout and fragment rules (layout.h).
#include "inner/protocol/layout.h"

#include "diloco/fragments.h"

#include <algorithm>
#include <unordered_set>

namespace geoloco::inner::protocol {
namespace {

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::uint64_t layout_values(const Layout& layout) {
  return layout.empty() ? 0 : layout.back().offset + layout.back().size();
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
    GEOLOCO_RETURN_IF(!names.insert(t.name).second, Err::invalid_argument, "tensor name '", t.name,
                      "' appears twice");
    GEOLOCO_RETURN_IF(t.dtype != DType::f32, Err::invalid_argument, "tensor '", t.name, "' is not fp32");
    GEOLOCO_RETURN_IF(std::find(t.shape.begin(), t.shape.end(), 0u) != t.shape.end(), Err::invalid_argument,
                      "tensor '", t.name, "' has shape ", shape_text(t.shape), " with a zero dimension");
    std::uint64_t n = t.size();  // saturates, so the bound below also catches overflow
    GEOLOCO_RETURN_IF(n > kMaxValues || at > kMaxValues - n, Err::invalid_argument, "the layout passes ",
                      kMaxValues, " values at tensor '", t.name, "'");
    GEOLOCO_RETURN_IF(t.offset != at, Err::invalid_argument, "tensor '", t.name, "' is at offset ", t.offset,
                      " but the previous tensors end at ", at,
                      " (tensors lie contiguously in layout order in one flat fp32 buffer)");
    at += n;
  }
  return {};
}

Status compare_layouts(const Layout& expected, const Layout& got) {
  std::size_t common = std::min(expected.size(), got.size());
  for (std::size_t i = 0; i < common; ++i) {
    const auto& e = expected[i];
    const auto& g = got[i];
    GEOLOCO_RETURN_IF(e.name != g.name, Err::mismatch, "tensor ", i, ": the job expects '", e.name,
                      "', the trainer sent '", g.name, "'");
    GEOLOCO_RETURN_IF(e.shape != g.shape, Err::mismatch, "tensor ", i, " ('", e.name, "'): the job expects shape ",
                      shape_text(e.shape), ", the trainer sent ", shape_text(g.shape));
    GEOLOCO_RETURN_IF(e.dtype != g.dtype, Err::mismatch, "tensor ", i, " ('", e.name, "'): dtype differs");
    GEOLOCO_RETURN_IF(e.offset != g.offset, Err::mismatch, "tensor ", i, " ('", e.name,
                      "'): the job expects offset ", e.offset, ", the trainer sent ", g.offset);
  }
  GEOLOCO_RETURN_IF(expected.size() != got.size(), Err::mismatch, "the job expects ", expected.size(),
                    " tensors (", layout_values(expected), " values), the trainer sent ", got.size(), " (",
                    layout_values(got), " values)");
  return {};
}

Status check_fragments(std::span<const FragmentDesc> fragments, const Layout& layout) {
  GEOLOCO_RETURN_IF(fragments.empty(), Err::invalid_argument, "the fragment table is empty");
  std::unordered_set<std::uint64_t> boundaries;
  for (const auto& t : layout) boundaries.insert(t.offset);
  std::uint64_t values = layout_values(layout);
  std::uint64_t at = 0;
  for (std::size_t f = 0; f < fragments.size(); ++f) {
    const auto& fr = fragments[f];
    GEOLOCO_RETURN_IF(fr.offset != at, Err::invalid_argument, "fragment ", f, " starts at ", fr.offset,
                      " but the previous fragments end at ", at);
    GEOLOCO_RETURN_IF(fr.length == 0, Err::invalid_argument, "fragment ", f, " is empty");
    GEOLOCO_RETURN_IF(fr.length > values - at, Err::invalid_argument, "fragment ", f, " ends past the ", values,
                      " values of the segment");
    GEOLOCO_RETURN_IF(!boundaries.count(fr.offset), Err::invalid_argument, "fragment ", f, " starts at ",
                      fr.offset, ", inside a tensor");
    at += fr.length;
  }
  GEOLOCO_RETURN_IF(at != values, Err::invalid_argument, "the fragments cover ", at, " of the ", values,
                    " values");
  return {};
}

Result<std::vector<FragmentDesc>> split_fragments(const Layout& layout, std::uint32_t count,
                                                  std::uint64_t next_round) {
  GEOLOCO_TRY(check_layout(layout));
  std::vector<std::uint64_t> sizes;
  for (const auto& t : layout) sizes.push_back(t.size());
  auto cut = diloco::cut_fragments(sizes, count);
  if (!cut.ok()) return cut.status();
  std::vector<FragmentDesc> out;
  for (const auto& f : *cut) out.push_back(FragmentDesc{f.offset, f.length, next_round});
  return out;
}

}  // namespace geoloco::inner::protocol
