// The parameter layout of a model: every tensor's name, shape and offset into
// ONE flat fp32 buffer. The daemon maps exactly this buffer through shared
// memory (docs/design.md §3, HELLO carries the layout), so parameters are never
// scattered: a model reads its tensors as sub-spans of the flat buffer, and
// its gradients lie in a second buffer with the same layout.
//
// This is not outer/layout.h: inner/ may not include outer/. The two describe
// the same thing and the protocol converts between them by name and shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::inner {

/// One tensor: row-major fp32, `size()` values starting at `offset`.
struct TensorSpec {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t offset = 0;  ///< in floats, from the start of the flat buffer

  std::size_t size() const {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    return n;
  }
};

class ParamLayout {
 public:
  /// Appends a tensor right after the previous one and returns its offset.
  /// Names must be unique and shapes non-empty with positive dimensions;
  /// models build their layouts from validated sizes, so a violation is a bug
  /// and is reported by validate().
  std::size_t add(std::string name, std::vector<std::size_t> shape);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  /// Total floats in the flat buffer.
  std::size_t total() const { return total_; }
  /// The tensor called `name`, or nullptr.
  const TensorSpec* find(const std::string& name) const;

  /// The tensor's values inside a flat buffer laid out by this layout.
  template <class T>
  std::span<T> view(std::span<T> flat, const TensorSpec& t) const {
    return flat.subspan(t.offset, t.size());
  }

  /// Rules: at least one tensor; names non-empty and unique; every dimension
  /// > 0; offsets contiguous. Errors: invalid_argument naming the tensor.
  Status validate() const;

 private:
  std::vector<TensorSpec> tensors_;
  std::size_t total_ = 0;
};

}  // namespace geoloco::inner
