// How long a server waits after its accept() failed `failures` times in a
// row (out of descriptors, EMFILE; out of memory): 25 ms, doubling, at most
// 1 s. Without it a loop that retries at once spins a core for as long as
// the condition lasts.
#pragma once

#include <algorithm>
#include <chrono>

namespace geoloco {

constexpr std::chrono::milliseconds accept_backoff(unsigned failures) {
  if (failures == 0) return std::chrono::milliseconds(0);
  const unsigned shift = std::min(failures - 1, 6u);  // 25 · 2^6 = 1600 > 1000
  return std::chrono::milliseconds(std::min(1000u, 25u << shift));
}

}  // namespace geoloco
