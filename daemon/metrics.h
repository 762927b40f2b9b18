// The site's metrics, rendered in Prometheus' text format (version 0.0.4)
// for the daemon's local HTTP endpoint. Names follow Prometheus' rules and
// the house ones: `geoloco_` prefix, base units, `_total` for counters,
// `_seconds` and `_bytes` suffixes (docs/design.md §7).
//
// Single-threaded like the daemon's event loop: the loop updates, the HTTP
// handler renders.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace geoloco::daemon {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  enum class Type { counter, gauge };

  /// Declares a metric. Errors: invalid_argument (name without the
  /// geoloco_ prefix, characters outside [a-z0-9_], a counter not ending in
  /// _total, or a second declaration with another type).
  Status declare(const std::string& name, Type type, const std::string& help);
  /// Adds to a counter (delta >= 0). Errors: invalid_argument (undeclared, not a counter, negative).
  Status add(const std::string& name, const Labels& labels, double delta);
  /// Sets a gauge. Errors: invalid_argument (undeclared or not a gauge).
  Status set(const std::string& name, const Labels& labels, double value);
  /// The current value, 0 when never set.
  double value(const std::string& name, const Labels& labels) const;

  /// The exposition text: HELP and TYPE lines, then samples, sorted by name
  /// and labels so the output is stable.
  std::string render() const;

 private:
  struct Family {
    Type type;
    std::string help;
    std::map<Labels, double> samples;
  };
  std::map<std::string, Family> families_;
};

/// Escapes a label value (backslash, double quote, newline).
std::string escape_label_value(const std::string& value);

}  // namespace geoloco::daemon
