// Layout and fragment rules (layout.h).
#include "inner/protocol/layout.h"

#include "diloco/fragments.h"

#include <algorithm>
#include <unordered_set>

namespace geoloco::inner::protocol {
Status compare_layouts(const Layout& expected, const Layout& got) {
  std::size_t common = std::min(expected.size(), got.size());
  for (std::size_t i = 0; i < common; ++i) {
    const auto& e = expected[i];
    const auto& g = got[i];
    GEOLOCO_RETURN_IF(e.name != g.name, Err::mismatch, "tensor ", i, ": the job expects '", e.name,
                      "', the trainer sent '", g.name, "'");
    GEOLOCO_RETURN_IF(e.shape != g.shape, Err::mismatch, "tensor ", i, " ('", e.name, "'): the job expects shape ",
                      shape_text(e.shape), ", the trainer sent ", shape_text(g.shape));
    GEOLOCO_RETURN_IF(e.offset != g.offset, Err::mismatch, "tensor ", i, " ('", e.name, "'): the job expects offset ",
                      e.offset, ", the trainer sent ", g.offset);
  }
  GEOLOCO_RETURN_IF(expected.size() != got.size(), Err::mismatch, "the job expects ", expected.size(), " tensors (",
                    layout_values(expected), " values), the trainer sent ", got.size(), " (", layout_values(got),
                    " values)");
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
    GEOLOCO_RETURN_IF(!boundaries.count(fr.offset), Err::invalid_argument, "fragment ", f, " starts at ", fr.offset,
                      ", inside a tensor");
    at += fr.length;
  }
  GEOLOCO_RETURN_IF(at != values, Err::invalid_argument, "the fragments cover ", at, " of the ", values, " values");
  return {};
}

Result<std::vector<FragmentDesc>> split_fragments(const Layout& layout, std::uint32_t count, std::uint64_t next_round) {
  GEOLOCO_TRY(check_layout(layout));
  std::vector<std::uint64_t> sizes;
  for (const auto& t : layout) sizes.push_back(t.size());
  auto cut = diloco::cut_fragments(sizes, count);
  if (!cut.ok()) return cut.status();
  std::vector<FragmentDesc> out;
  for (const auto& f : *cut) out.push_back(FragmentDesc{f.offset, f.length, next_round});
  return out;
}

Result<std::vector<FragmentDesc>> welcome_table(const Layout& layout, std::uint32_t count, std::uint64_t next_round,
                                                bool streaming) {
  auto table = split_fragments(layout, count, next_round);
  if (table.ok() && streaming)
    for (std::uint32_t f = 0; f < table->size(); ++f)
      (*table)[f].next_round = diloco::next_round_of_fragment(f, next_round, count);
  return table;
}

}  // namespace geoloco::inner::protocol
