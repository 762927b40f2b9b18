// The site's metrics, kept in a prometheus-cpp registry and rendered by its
// text serializer (Prometheus' text format 0.0.4) for the daemon's local
// HTTP endpoint (metrics_http.h). Names follow Prometheus' rules and
// the house ones: `geoloco_` prefix, base units, `_total` for counters,
// `_seconds` and `_bytes` suffixes (docs/design.md §7).
//
// Single-threaded like the daemon's event loop: the loop updates, the HTTP
// handler renders.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace geoloco::daemon {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  enum class Type { counter, gauge };

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  /// Declares a metric. Errors: invalid_argument (name without the
  /// geoloco_ prefix, characters outside [a-z0-9_], a counter not ending in
  /// _total, or a second declaration with another type).
  Status declare(const std::string& name, Type type, const std::string& help);
  /// Adds to a counter (delta >= 0). Errors: invalid_argument (undeclared, not a counter, negative).
  Status add(const std::string& name, const Labels& labels, double delta);
  /// Sets a gauge. Errors: invalid_argument (undeclared or not a gauge).
  Status set(const std::string& name, const Labels& labels, double value);
  /// Removes a gauge's sample (a peer gone, a file no longer configured),
  /// so it is not shown with a stale value. Nothing when it has none.
  void remove(const std::string& name, const Labels& labels);
  /// The current value, 0 when never set.
  double value(const std::string& name, const Labels& labels) const;

  /// The exposition text: HELP and TYPE lines, then samples, sorted by name
  /// and labels so the output is stable. Labels are written in name order; a
  /// metric that never had a value is not written.
  std::string render() const;

 private:
  struct Family {
    Type type;
    prometheus::Family<prometheus::Counter>* counters = nullptr;  ///< owned by registry_
    prometheus::Family<prometheus::Gauge>* gauges = nullptr;
  };
  std::shared_ptr<prometheus::Registry> registry_;
  std::map<std::string, Family> families_;
};

}  // namespace geoloco::daemon
