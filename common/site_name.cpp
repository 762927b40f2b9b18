#include "common/site_name.h"

#include "common/status.h"

namespace geoloco {

std::string site_name_problem(const std::string& name) {
  if (name.empty() || name.size() > 64) return "a site name has 1 to 64 characters";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) return cat("a site name uses only a-z, 0-9, '-' and '.'; '", name, "' does not");
  }
  return {};
}

}  // namespace geoloco
