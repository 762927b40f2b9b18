// The shared-memory segment that holds a job's parameters between trainer and
// daemon: a memfd of `values` fp32 values, mapped by both sides. The daemon
// creates and seals it (no shrink, no grow), so a trainer can never make the
// daemon's mapping fault by truncating the file; the trainer maps the
// descriptor it received on WELCOME after checking its size.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "inner/protocol/unix_socket.h"

namespace geoloco::inner::protocol {

class SharedSegment {
 public:
  SharedSegment() = default;
  SharedSegment(SharedSegment&& o) noexcept;
  SharedSegment& operator=(SharedSegment&& o) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  /// A new zero-filled, sealed memfd of `values` fp32 values, mapped
  /// read-write. `name` shows in /proc/PID/fd (e.g. "geoloco:job").
  /// Errors: invalid_argument (0 values), io (memfd_create, ftruncate, mmap).
  static Result<SharedSegment> create(const std::string& name, std::uint64_t values);

  /// Maps a received descriptor that must hold exactly `values` fp32 values.
  /// Errors: mismatch (another size), io.
  static Result<SharedSegment> map(UniqueFd fd, std::uint64_t values);

  bool mapped() const { return data_ != nullptr; }
  std::span<float> values() { return {data_, size_}; }
  std::span<const float> values() const { return {data_, size_}; }
  int fd() const { return fd_.get(); }

 private:
  void unmap();
  UniqueFd fd_;
  float* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace geoloco::inner::protocol
