// libFuzzer target: arbitrary bytes as a history line must be refused or
// parsed cleanly, never crash; a line that parses re-encodes to a line that
// parses to the same encoding (what the checker reads is what was written).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "history/events.h"

using namespace geoloco::history;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto record = parse_record(line);
  if (!record.ok()) return 0;
  const std::string once = encode_record(*record);
  auto again = parse_record(once);
  if (!again.ok() || encode_record(*again) != once) std::abort();
  return 0;
}
