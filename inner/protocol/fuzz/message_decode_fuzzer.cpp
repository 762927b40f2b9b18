// libFuzzer target: arbitrary bytes as a stream of local sync messages, as a
// daemon reads them from a trainer, must be refused or decoded cleanly, never
// crash, read out of bounds or allocate past the body bound; whatever
// decodes (except ERROR, whose unknown codes map to "internal") must
// re-encode to the same body.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "inner/protocol/layout.h"
#include "inner/protocol/message.h"

using namespace geoloco::inner::protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  MessageBuffer buffer(WireLimits{1 << 16});
  buffer.append(std::as_bytes(std::span(data, size)));
  for (int i = 0; i < 64; ++i) {
    auto raw = buffer.next();
    if (!raw.ok() || !raw->has_value()) return 0;
    auto message = decode_body((*raw)->header.type, (*raw)->body);
    if (!message.ok()) continue;
    // The daemon's next steps on a HELLO: the layout rules must hold up too.
    if (auto* hello = std::get_if<HelloMsg>(&*message)) (void)check_layout(hello->layout);
    if ((*raw)->header.type == MessageType::error) continue;
    auto again = encode(*message);
    if (!again.ok()) std::abort();
    auto body = std::span(*again).subspan(kHeaderSize);
    if (body.size() != (*raw)->body.size() || !std::equal(body.begin(), body.end(), (*raw)->body.begin())) std::abort();
  }
  return 0;
}
