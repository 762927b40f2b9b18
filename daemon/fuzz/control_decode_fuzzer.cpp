// libFuzzer target: arbitrary bytes as a peer's control message must be
// refused or decoded cleanly, never crash; a message that decodes
// re-encodes to text that decodes to the same encoding.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "daemon/control_messages.h"

using namespace geoloco::daemon;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto message = decode_control(text);
  if (!message.ok()) return 0;
  const std::string once = encode_control(*message);
  auto again = decode_control(once);
  if (!again.ok() || encode_control(*again) != once) std::abort();
  return 0;
}
