// The parameter layout of a model, the one description every part uses: the
// trainer's model (inner/), the sync protocol's HELLO (inner/protocol/), the
// outer state and its checkpoint (outer/), and the daemon. Every tensor is
// row-major fp32 and they lie contiguously, in layout order, in one flat
// buffer: tensor 0 at offset 0, each next one where the previous ends. So a
// model reads its tensors as sub-spans of the buffer the daemon maps, and
// fragments are cut along tensor boundaries (diloco/fragments.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace geoloco {

/// One tensor: `size()` fp32 values starting at `offset` (in values) of the flat buffer.
struct TensorDesc {
  std::string name;
  std::vector<std::uint64_t> shape;  ///< empty: a scalar, one value
  std::uint64_t offset = 0;

  /// Product of the shape; saturates at UINT64_MAX instead of wrapping.
  std::uint64_t size() const;
  bool operator==(const TensorDesc&) const = default;
};
using Layout = std::vector<TensorDesc>;

/// Largest layout accepted: 2^36 values = 256 GiB of fp32. Refused before
/// any multiplication could overflow or any memory is reserved.
inline constexpr std::uint64_t kMaxLayoutValues = 1ull << 36;

/// Values in the flat buffer (where the last tensor ends); 0 for an empty layout.
std::uint64_t layout_values(const Layout& layout);

/// Rules: at least one tensor; names non-empty, unique, without control
/// characters; every dimension > 0; tensors contiguous in layout order; at
/// most kMaxLayoutValues values. Errors: invalid_argument naming the tensor
/// and the rule.
Status check_layout(const Layout& layout);

/// The tensor called `name`, or nullptr.
const TensorDesc* find_tensor(const Layout& layout, std::string_view name);

/// "[256, 784]".
std::string shape_text(const std::vector<std::uint64_t>& shape);

/// `known` when it holds exactly `values` values; otherwise one tensor of
/// `values` values named "parameters", the layout of a flat buffer whose
/// tensors are not known (e.g. before any trainer said HELLO).
Layout layout_for(std::uint64_t values, const Layout& known = {});

}  // namespace geoloco
