// Session decisions (session_rules.h).
#include "inner/protocol/session_rules.h"

#include <algorithm>
#include <cmath>

#include "common/finite.h"

namespace geoloco::inner::protocol {

Status check_sync(const SyncMsg& sync, std::span<const FragmentState> fragments) {
  GEOLOCO_RETURN_IF(sync.fragment >= fragments.size(), Err::invalid_argument, "SYNC names fragment ", sync.fragment,
                    " but the job has ", fragments.size(), " fragment(s)");
  const auto& f = fragments[sync.fragment];
  GEOLOCO_RETURN_IF(f.in_flight, Err::mismatch, "fragment ", sync.fragment, " of round ", f.desc.next_round,
                    " is already being synchronized; wait for its RESULT before the next SYNC");
  GEOLOCO_RETURN_IF(sync.round != f.desc.next_round, Err::mismatch, "SYNC is for round ", sync.round, " but fragment ",
                    sync.fragment, " is due for round ", f.desc.next_round, "; the trainer is not in round ",
                    sync.round);
  return {};
}

Status check_finite(std::span<const float> values, std::uint64_t offset, const Layout& layout) {
  const auto first = first_non_finite(values);
  if (!first) return {};
  const auto bad = values.begin() + static_cast<std::ptrdiff_t>(*first);
  std::uint64_t at = offset + *first;
  // Name the tensor: the user debugs a model, not a flat buffer.
  auto t = std::upper_bound(layout.begin(), layout.end(), at,
                            [](std::uint64_t v, const TensorDesc& d) { return v < d.offset; });
  const char* what = std::isnan(*bad) ? "a NaN" : "an infinite";
  if (t == layout.begin()) return GEOLOCO_ERROR(Err::non_finite, "value ", at, " of the replica is ", what, " value");
  --t;
  return GEOLOCO_ERROR(Err::non_finite, "the replica's tensor '", t->name, "' has ", what, " value at index ",
                       at - t->offset, "; the replica is refused so it cannot poison the anchor");
}

Status check_completion(std::uint32_t fragment, std::span<const FragmentState> fragments, std::uint64_t anchor_values,
                        std::uint64_t next_round) {
  GEOLOCO_RETURN_IF(fragment >= fragments.size(), Err::invalid_argument, "fragment ", fragment,
                    " does not exist (the job has ", fragments.size(), ")");
  const auto& f = fragments[fragment];
  GEOLOCO_RETURN_IF(!f.in_flight, Err::invalid_argument, "fragment ", fragment, " has no SYNC to answer");
  GEOLOCO_RETURN_IF(anchor_values != f.desc.length, Err::invalid_argument, "the anchor of fragment ", fragment, " has ",
                    anchor_values, " values; the fragment has ", f.desc.length);
  GEOLOCO_RETURN_IF(next_round <= f.desc.next_round, Err::invalid_argument, "next round ", next_round,
                    " does not come after the synchronized round ", f.desc.next_round);
  return {};
}

}  // namespace geoloco::inner::protocol
