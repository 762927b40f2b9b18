// libFuzzer target: arbitrary text as a job file (what `geoloco submit` sends
// and geolocod parses) must be refused with the problems listed or accepted,
// never crash.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/yaml_reader.h"
#include "job/job_spec.h"

using namespace geoloco;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = yaml::load_text(text, "fuzz.yaml");
  if (!doc.ok()) return 0;
  auto spec = job::parse_job_yaml(*doc, "fuzz.yaml");
  if (!spec.ok() && spec.status().message().empty()) std::abort();
  return 0;
}
