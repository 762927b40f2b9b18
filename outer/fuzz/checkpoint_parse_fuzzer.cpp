// libFuzzer target: arbitrary bytes as a checkpoint file must be refused with
// a message or loaded whole, never crash; a loaded state is consistent (every
// tensor as long as the layout says).
#include <cstdint>
#include <cstdlib>
#include <span>

#include "outer/checkpoint.h"

using namespace geoloco;
using namespace geoloco::outer;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  CheckpointLimits limits;
  auto loaded = parse_checkpoint(std::as_bytes(std::span(data, size)), "fuzz.safetensors", limits);
  if (!loaded.ok()) {
    if (loaded.status().message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  const OuterState& s = loaded->state;
  const std::uint64_t n = layout_values(s.layout);
  if (s.anchor.size() != n || s.momentum.size() != n) std::abort();
  for (const auto& r : s.residuals)
    if (r.values.size() != n) std::abort();
  return 0;
}
