// Little-endian readers and writers over caller-owned byte spans. Every read
// and write is bounds-checked; a failed read leaves the reader marked failed
// so a parser can check once at the end of a header. Used by the payload
// header (compression/) and the frame header (transport/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace geoloco {

class ByteWriter {
 public:
  explicit ByteWriter(std::span<std::byte> out) : out_(out) {}

  template <class T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (failed_ || out_.size() - pos_ < sizeof(T)) {
      failed_ = true;
      return;
    }
    std::memcpy(out_.data() + pos_, &value, sizeof(T));  // x86-64 and aarch64 are little-endian
    pos_ += sizeof(T);
  }
  void put_bytes(std::span<const std::byte> bytes) {
    if (failed_ || out_.size() - pos_ < bytes.size()) {
      failed_ = true;
      return;
    }
    if (!bytes.empty()) std::memcpy(out_.data() + pos_, bytes.data(), bytes.size());
    pos_ += bytes.size();
  }
  /// Unsigned LEB128.
  void put_varint(std::uint64_t v) {
    while (v >= 0x80) {
      put(static_cast<std::uint8_t>(v | 0x80));
      v >>= 7;
    }
    put(static_cast<std::uint8_t>(v));
  }
  std::size_t size() const { return pos_; }
  bool failed() const { return failed_; }

 private:
  std::span<std::byte> out_;
  std::size_t pos_ = 0;
  bool failed_ = false;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}

  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T value{};
    if (failed_ || in_.size() - pos_ < sizeof(T)) {
      failed_ = true;
      return value;
    }
    std::memcpy(&value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::span<const std::byte> get_bytes(std::size_t n) {
    if (failed_ || in_.size() - pos_ < n) {
      failed_ = true;
      return {};
    }
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  /// Unsigned LEB128 of at most 10 bytes; longer or overflowing input fails.
  std::uint64_t get_varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      auto b = get<std::uint8_t>();
      if (failed_) return 0;
      if (shift == 63 && (b & 0x7e) != 0) {
        failed_ = true;
        return 0;
      }
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    failed_ = true;
    return 0;
  }
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return failed_ ? 0 : in_.size() - pos_; }
  bool failed() const { return failed_; }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace geoloco
