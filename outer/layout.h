// The parameter layout of a job: the model's tensors in the order they lie in
// the flat fp32 parameter buffer (docs/design.md §3's HELLO carries it). Fragments
// (fragments.h) are cut along these boundaries and checkpoints record it so
// a user can take named tensors out of the flat anchor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::outer {

/// One tensor of the model: a name and a shape; fp32, stored contiguously.
struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> shape;  ///< empty shape = a scalar (one value)

  /// Number of fp32 values (product of the shape).
  std::uint64_t size() const {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

/// Sum of the tensors' sizes.
std::uint64_t total_size(const std::vector<TensorInfo>& layout);

/// Rules: names non-empty, unique, without control characters; every tensor
/// has at least one value; the total fits in 2^40 values (refused before it
/// can overflow). Errors: invalid_argument naming the tensor and the rule.
Status validate_layout(const std::vector<TensorInfo>& layout);

}  // namespace geoloco::outer
