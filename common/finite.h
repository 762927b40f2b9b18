// Whether float values are all finite (no NaN, no infinity), read from
// their exponent bits a block at a time: a loop the compiler vectorizes,
// where std::isfinite with an early exit runs one value at a time. Used on
// every pass that must refuse a non-finite value before it writes anything
// (the outer step, a trainer's replica).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace geoloco {

/// The index of the first value that is NaN or infinite, if any.
inline std::optional<std::size_t> first_non_finite(std::span<const float> values) {
  constexpr std::uint32_t kExponent = 0x7f800000u;  // all ones: NaN or infinity
  constexpr std::size_t kBlock = 64;
  std::size_t i = 0;
  for (; i + kBlock <= values.size(); i += kBlock) {
    std::uint32_t bad = 0;
    for (std::size_t j = 0; j < kBlock; ++j)
      bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(values[i + j]) & kExponent) == kExponent);
    if (bad != 0) break;  // the first one is in this block
  }
  for (; i < values.size(); ++i)
    if (!std::isfinite(values[i])) return i;
  return std::nullopt;
}

}  // namespace geoloco
