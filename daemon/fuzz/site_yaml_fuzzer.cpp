// libFuzzer target: arbitrary text as a site file must be refused with the
// problems listed or accepted, never crash.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/yaml_reader.h"
#include "daemon/site_config.h"

using namespace geoloco;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = yaml::load_text(text, "fuzz.yaml");
  if (!doc.ok()) return 0;
  auto site = daemon::parse_site_yaml(*doc, "fuzz.yaml");
  if (!site.ok() && site.status().message().empty()) std::abort();
  return 0;
}
