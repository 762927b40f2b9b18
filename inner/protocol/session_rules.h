// The decisions of a sync session as pure functions: given the
// fragments' state and a message or a daemon call, say whether it is
// allowed and, if not, why. server.h applies them before it changes any
// state, so a refused message leaves the daemon side exactly as it was.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "inner/protocol/message.h"

namespace geoloco::inner::protocol {

/// One fragment as the daemon side tracks it. While `in_flight` the daemon
/// owns the fragment's values in the segment (it reads the replica, then
/// writes the anchor); otherwise the trainer does.
struct FragmentState {
  FragmentDesc desc;  ///< desc.next_round: the round the next SYNC must carry
  bool in_flight = false;
  bool operator==(const FragmentState&) const = default;
};

/// A trainer's SYNC: the fragment exists, is not already in flight, and the
/// round is the one it is due for. Errors: invalid_argument (unknown
/// fragment), mismatch (wrong round, or already in flight).
Status check_sync(const SyncMsg& sync, std::span<const FragmentState> fragments);

/// Every value of `values` (which start at `offset` of a segment laid out by
/// `layout`) is finite. Errors: non_finite naming the tensor and the index.
Status check_finite(std::span<const float> values, std::uint64_t offset, const Layout& layout);

/// The daemon's answer to a SYNC: the fragment is in flight, the anchor has
/// its length, and the next round lies after the synced one. Errors:
/// invalid_argument naming the broken rule.
Status check_completion(std::uint32_t fragment, std::span<const FragmentState> fragments, std::uint64_t anchor_values,
                        std::uint64_t next_round);

}  // namespace geoloco::inner::protocol
