// The builder of a model's parameter layout (common/layout.h: every
// tensor's name, shape and offset into ONE flat fp32 buffer). The daemon maps
// exactly this buffer through shared memory (docs/design.md §3, HELLO carries
// the layout), so parameters are never scattered: a model reads its tensors
// as sub-spans of the flat buffer, and its gradients lie in a second buffer
// with the same layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/status.h"

namespace geoloco::inner {

class ParamLayout {
 public:
  /// Appends a tensor right after the previous one and returns its offset.
  /// Models build their layouts from validated sizes, so a violation of the
  /// layout rules is a bug and is reported by validate().
  std::size_t add(std::string name, std::vector<std::uint64_t> shape);

  const Layout& tensors() const { return tensors_; }
  /// Total floats in the flat buffer.
  std::size_t total() const { return total_; }
  /// The tensor called `name`, or nullptr.
  const TensorDesc* find(const std::string& name) const { return find_tensor(tensors_, name); }

  /// The tensor's values inside a flat buffer laid out by this layout.
  template <class T>
  std::span<T> view(std::span<T> flat, const TensorDesc& t) const {
    return flat.subspan(t.offset, t.size());
  }

  /// common/layout.h's check_layout(), with at least one dimension per
  /// tensor (models have no scalars). Errors: invalid_argument naming the tensor.
  Status validate() const;

 private:
  Layout tensors_;
  std::size_t total_ = 0;
};

}  // namespace geoloco::inner
