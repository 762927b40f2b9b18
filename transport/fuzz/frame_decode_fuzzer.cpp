// libFuzzer target: arbitrary bytes as a frame header (and payload) must be
// refused or accepted cleanly, never crash or read out of bounds.
#include <cstdint>
#include <cstring>
#include <span>

#include "transport/frame.h"

using namespace geoloco::transport;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kFrameHeaderSize) return 0;
  std::array<std::byte, kFrameHeaderSize> head;
  std::memcpy(head.data(), data, kFrameHeaderSize);
  auto header = decode_header(head, FrameLimits{1 << 20});
  if (!header.ok()) return 0;
  auto rest = std::as_bytes(std::span(data + kFrameHeaderSize, size - kFrameHeaderSize));
  (void)verify_payload(*header, rest.first(std::min<std::size_t>(rest.size(), header->payload_size)));
  return 0;
}
