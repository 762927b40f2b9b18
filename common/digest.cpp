#include "common/digest.h"

#include <xxhash.h>

#include <cstdio>

namespace geoloco {

std::uint64_t xxh3_64(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::uint64_t digest_f32(std::span<const float> values) {
  return XXH3_64bits(values.data(), values.size_bytes());
}

std::string digest_hex(std::uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

}  // namespace geoloco
