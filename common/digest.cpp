#include "common/digest.h"

#include <xxhash.h>

#include <cstdio>

namespace geoloco {

std::uint64_t xxh3_64(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::uint64_t digest_f32(std::span<const float> values) { return XXH3_64bits(values.data(), values.size_bytes()); }

StreamingDigest::StreamingDigest() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
StreamingDigest::~StreamingDigest() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void StreamingDigest::update(std::span<const float> values) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), values.data(), values.size_bytes());
}
std::uint64_t StreamingDigest::value() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

std::string digest_hex(std::uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

}  // namespace geoloco
