// Rules about parameter layouts and fragments, as pure functions: what a
// HELLO's layout must satisfy, how it is compared with the layout a job
// expects (with a message a user can act on), and what a fragment table must
// satisfy. The daemon side (server.h) and the trainer side (client.h) both
// apply them; nothing here touches a socket.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "inner/protocol/message.h"

namespace geoloco::inner::protocol {

/// Largest segment accepted: common/layout.h's bound.
inline constexpr std::uint64_t kMaxValues = kMaxLayoutValues;

// What a HELLO's layout must satisfy is common/layout.h's check_layout().

/// Ok when `got` equals `expected` tensor by tensor; otherwise mismatch
/// naming the first difference ("tensor 2 ('fc2.weight'): the job expects
/// shape [10, 256], the trainer sent [256, 10]").
Status compare_layouts(const Layout& expected, const Layout& got);

/// Rules for a fragment table over a segment of `values` values laid out by
/// `layout`: at least one fragment; fragments are non-empty, in order, and
/// cover [0, values) without gaps; every boundary is a tensor boundary (a
/// fragment never cuts a tensor, docs/design.md §1). Errors: invalid_argument naming
/// the fragment and the rule.
Status check_fragments(std::span<const FragmentDesc> fragments, const Layout& layout);

/// Cuts the layout into `count` contiguous fragments (diloco::cut_fragments:
/// each ends at the first tensor boundary at or past (k+1)/count of the
/// values and keeps at least one tensor), all starting at `next_round`. Errors: invalid_argument (a bad layout; count 0
/// or more than the tensors).
Result<std::vector<FragmentDesc>> split_fragments(const Layout& layout, std::uint32_t count, std::uint64_t next_round);

/// The table a trainer is welcomed with before round `next_round`: the
/// layout cut into `count` fragments, each due at `next_round`, or with
/// streaming at the round that syncs it next (diloco::next_round_of_fragment).
/// Errors: those of split_fragments.
Result<std::vector<FragmentDesc>> welcome_table(const Layout& layout, std::uint32_t count, std::uint64_t next_round,
                                                bool streaming);

}  // namespace geoloco::inner::protocol
