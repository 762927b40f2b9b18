// Test and benchmark data shaped like a DiLoCo pseudo-gradient: a sequence
// of "tensors" (runs of 4 Ki to 256 Ki values) each with its own log-normal
// scale, and heavy-tailed (Pareto, tail index 3) values inside each. Uniform
// noise would flatter top-k and quantization; this does not.
#pragma once

#include <cstdint>
#include <span>

namespace geoloco::compression {

/// Fills `out` with the values at [first, first + out.size()) of the
/// synthetic stream `seed`; any range can be generated on its own, so a
/// huge tensor can be produced chunk by chunk.
void fill_synthetic_gradient(std::span<float> out, std::uint64_t seed, std::uint64_t first = 0);

}  // namespace geoloco::compression
