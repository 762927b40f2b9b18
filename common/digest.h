// Content digests: xxh3-64 over bytes, and over fp32 tensors (the anchor
// digest every site reports at COMMIT, docs/design.md §1 step 6).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace geoloco {

/// xxh3-64 of the bytes, seed 0.
std::uint64_t xxh3_64(std::span<const std::byte> bytes);
/// xxh3-64 of the fp32 bytes of `values` (bit patterns, so -0.0 != 0.0).
std::uint64_t digest_f32(std::span<const float> values);
/// xxh3-64 computed piece by piece: equal to digest_f32 of the
/// concatenation of the pieces (e.g. an anchor produced chunk by chunk).
class StreamingDigest {
 public:
  StreamingDigest();
  ~StreamingDigest();
  StreamingDigest(const StreamingDigest&) = delete;
  StreamingDigest& operator=(const StreamingDigest&) = delete;
  void update(std::span<const float> values);
  std::uint64_t value() const;

 private:
  void* state_;
};

/// 16 lower-case hex digits.
std::string digest_hex(std::uint64_t digest);

}  // namespace geoloco
