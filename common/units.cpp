#include "common/units.h"

#include <cmath>
#include <cstdlib>

namespace geoloco {

namespace {

constexpr const char* kSuffixes = "k, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024)";

Result<double> parse_quantity(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  GEOLOCO_RETURN_IF(end == text.c_str() || !std::isfinite(v) || !(v > 0), Err::invalid_argument, "'", text,
                    "': expected a number > 0 with an optional suffix ", kSuffixes);
  const std::string suffix(end);
  double scale = 1;
  if (suffix == "k" || suffix == "K") scale = 1e3;
  else if (suffix == "M") scale = 1e6;
  else if (suffix == "G") scale = 1e9;
  else if (suffix == "T") scale = 1e12;
  else if (suffix == "Ki") scale = 1024.0;
  else if (suffix == "Mi") scale = 1024.0 * 1024;
  else if (suffix == "Gi") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "Ti") scale = 1024.0 * 1024 * 1024 * 1024;
  else
    GEOLOCO_RETURN_IF(!suffix.empty(), Err::invalid_argument, "'", text, "': unknown suffix '", suffix, "' (",
                      kSuffixes, ")");
  return v * scale;
}

}  // namespace

Result<double> parse_rate(const std::string& text) { return parse_quantity(text); }

Result<double> parse_count(const std::string& text) {
  char* end = nullptr;
  if (std::strtod(text.c_str(), &end) == 0.0 && end != text.c_str() && *end == '\0') return 0.0;
  auto v = parse_quantity(text);
  if (!v.ok()) return v.status();
  return std::round(*v);
}

Result<double> parse_rate_cap(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() && v == 0.0) {  // 0, 0.0 or 0M: no cap, whatever the suffix
    auto suffix = parse_quantity(cat("1", end));
    if (suffix.ok()) return 0.0;
  }
  auto rate = parse_quantity(text);
  if (!rate.ok()) return Status(Err::invalid_argument, cat(rate.status().message(), ", or 0 for no cap"));
  // A plain number is bit/s: a cap of a few hundred is a unit slip (900 for
  // 900 Mbit/s), and would stall every transfer.
  GEOLOCO_RETURN_IF(*rate < 1000, Err::invalid_argument, "'", text, "': a cap of ", *rate,
                    " bit/s is below 1 kbit/s; rates are bit/s with a suffix (e.g. 900M), or 0 for no cap");
  return *rate;
}

Result<std::uint64_t> parse_size(const std::string& text) {
  auto v = parse_quantity(text);
  if (!v.ok()) return v.status();
  GEOLOCO_RETURN_IF(*v != std::floor(*v) || *v > 9.0e18, Err::invalid_argument, "'", text,
                    "': a size is a whole number of bytes");
  return static_cast<std::uint64_t>(*v);
}

}  // namespace geoloco
