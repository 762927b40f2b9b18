#include "compression/error_feedback.h"

#include <algorithm>
#include <cmath>

namespace geoloco::compression {

ErrorFeedback::ErrorFeedback(std::size_t elements) : residual_(elements, 0.0f) {}

Result<std::size_t> ErrorFeedback::encode_keeping_residual(Pipeline& pipeline, std::size_t offset,
                                                           std::span<const float> delta, std::span<std::byte> out,
                                                           std::uint64_t seed) {
  const std::size_t n = delta.size();
  GEOLOCO_RETURN_IF(offset > residual_.size() || n > residual_.size() - offset, Err::invalid_argument,
                    "error feedback: range [", offset, ", ", offset + n, ") is outside the tensor of ",
                    residual_.size(), " values");
  corrected_.resize(n);
  const float* e = residual_.data() + offset;
  for (std::size_t i = 0; i < n; ++i) corrected_[i] = delta[i] + e[i];
  return pipeline.encode(corrected_, out, seed);
}

Result<std::size_t> ErrorFeedback::encode(Pipeline& pipeline, std::size_t offset, std::span<const float> delta,
                                          std::span<std::byte> out, std::uint64_t seed) {
  auto size = encode_keeping_residual(pipeline, offset, delta, out, seed);
  if (!size.ok()) return size;
  const std::size_t n = delta.size();
  decoded_.resize(n);
  float* e = residual_.data() + offset;
  // Decode the very bytes that leave this site, so the residual is exact
  // (from before the lossless byte codec: the same values, no decompression).
  GEOLOCO_TRY(pipeline.decode_last_encoded(out.first(*size), decoded_));
  for (std::size_t i = 0; i < n; ++i) e[i] = corrected_[i] - decoded_[i];
  return size;
}

void ErrorFeedback::clear_range(std::size_t offset, std::size_t length) {
  if (offset >= residual_.size()) return;
  const std::size_t n = std::min(length, residual_.size() - offset);
  std::fill_n(residual_.begin() + static_cast<std::ptrdiff_t>(offset), n, 0.0f);
}

double ErrorFeedback::residual_norm() const {
  double sum = 0.0;
  for (float v : residual_) sum += static_cast<double>(v) * v;
  return std::sqrt(sum);
}

}  // namespace geoloco::compression
