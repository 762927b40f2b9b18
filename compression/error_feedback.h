// Error feedback (docs/design.md §1 step 3): a site keeps what compression dropped
// and adds it to the next round's pseudo-gradient,
//   g = delta + e;  c = C(g);  e <- g - D(c)
// so over many rounds the decoded outputs add up to the inputs. The residual
// e is one fp32 per parameter and lives on its site only; the work buffers
// are bounded by one chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"
#include "compression/pipeline.h"

namespace geoloco::compression {

class ErrorFeedback {
 public:
  /// A zero residual for a tensor of `elements` values.
  explicit ErrorFeedback(std::size_t elements);
  /// Continues from a residual kept earlier (a checkpoint's).
  explicit ErrorFeedback(std::vector<float> residual) : residual_(std::move(residual)) {}

  /// Compresses delta (the values at [offset, offset + delta.size()) of the
  /// tensor) with the residual added, writes the payload into `out`, and
  /// keeps what the payload does not carry as the new residual. Returns the
  /// payload size. Errors: as Pipeline::encode, invalid_argument for a range
  /// outside the tensor. On error the residual is unchanged.
  Result<std::size_t> encode(Pipeline& pipeline, std::size_t offset, std::span<const float> delta,
                             std::span<std::byte> out, std::uint64_t seed);

  std::span<const float> residual() const { return residual_; }
  /// ||e||_2, accumulated in double.
  double residual_norm() const;
  /// Zeroes the residual of [offset, offset + length), clamped to the tensor:
  /// what a caller does with the residual of a round whose encodes are not
  /// kept (they changed it, and the round's Δ will be sent again).
  void clear_range(std::size_t offset, std::size_t length);

 private:
  // encode()'s payload of delta + residual, the residual left as it is.
  Result<std::size_t> encode_keeping_residual(Pipeline& pipeline, std::size_t offset, std::span<const float> delta,
                                              std::span<std::byte> out, std::uint64_t seed);
  std::vector<float> residual_;
  std::vector<float> corrected_;  // g for the current chunk
  std::vector<float> decoded_;    // D(c) for the current chunk
};

}  // namespace geoloco::compression
