// libFuzzer target: any bytes handed to the payload decoder must give either
// finite values or an error, never a crash or an out-of-bounds access
// (built with -fsanitize=fuzzer,address,undefined by scripts/test.sh).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "compression/payload.h"
#include "compression/pipeline.h"

using namespace geoloco::compression;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  // The receiver knows how many values a chunk holds; take the count the
  // header claims when it is modest (as a transport's bound would), and a
  // fixed one otherwise, so both the match and the mismatch paths run.
  std::size_t n = 4096;
  auto header = parse_payload_header(bytes);
  if (header.ok() && header->element_count <= (1u << 20)) n = static_cast<std::size_t>(header->element_count);
  std::vector<float> out(n);
  if (decode_payload(bytes, out).ok()) {
    for (float v : out)
      if (!std::isfinite(v)) std::abort();  // decoders promise finite output
  }
  (void)inspect_payload(bytes);
  return 0;
}
