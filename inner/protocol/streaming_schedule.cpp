#include "inner/protocol/streaming_schedule.h"

namespace geoloco::inner::protocol {

std::uint32_t fragment_of_round(std::uint64_t k, std::uint32_t fragments) {
  return fragments <= 1 ? 0 : static_cast<std::uint32_t>(k % fragments);
}

std::uint64_t next_round_of_fragment(std::uint32_t fragment, std::uint64_t from, std::uint32_t fragments) {
  if (fragments <= 1) return from;
  const std::uint64_t have = from % fragments;
  return from + (fragment + fragments - have) % fragments;
}

std::uint64_t steps_through_round(std::uint64_t k, std::uint32_t fragments, std::uint64_t inner_steps) {
  if (k == 0) return 0;
  const std::uint64_t f = fragments == 0 ? 1 : fragments;
  return (k - 1) / f * inner_steps + ((k - 1) % f + 1) * inner_steps / f;
}

}  // namespace geoloco::inner::protocol
