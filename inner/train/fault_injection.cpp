#include "inner/train/fault_injection.h"

#include <string_view>

namespace geoloco::inner {

Result<std::uint64_t> parse_step_delay_ms(const char* value) {
  if (value == nullptr) return std::uint64_t{0};
  const std::string_view text(value);
  constexpr std::uint64_t kMax = 3'600'000;
  bool digits = !text.empty() && text.size() <= 7;
  std::uint64_t ms = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      digits = false;
      break;
    }
    ms = ms * 10 + static_cast<std::uint64_t>(c - '0');
  }
  GEOLOCO_RETURN_IF(!digits || ms > kMax, Err::invalid_argument, kStepDelayEnv, "='", text,
                    "' is not a whole number of milliseconds between 0 and ", kMax, " (e.g. ", kStepDelayEnv, "=200)");
  return ms;
}

}  // namespace geoloco::inner
