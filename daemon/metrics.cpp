#include "daemon/metrics.h"

#include <algorithm>
#include <map>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <stdexcept>

namespace geoloco::daemon {

namespace {
bool valid_name(const std::string& name) {
  if (name.rfind("geoloco_", 0) != 0) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

prometheus::Labels labels_of(const Labels& labels) { return prometheus::Labels(labels.begin(), labels.end()); }
}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {}
Metrics::~Metrics() = default;

Status Metrics::declare(const std::string& name, Type type, const std::string& help) {
  GEOLOCO_RETURN_IF(!valid_name(name), Err::invalid_argument, "metric '", name,
                    "': names start with geoloco_ and use only a-z, 0-9 and _");
  GEOLOCO_RETURN_IF(type == Type::counter && (name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0),
                    Err::invalid_argument, "counter '", name, "' must end in _total");
  if (auto it = families_.find(name); it != families_.end()) {
    GEOLOCO_RETURN_IF(it->second.type != type, Err::invalid_argument, "metric '", name,
                      "' was declared with another type");
    return {};
  }
  Family f{type};
  if (type == Type::counter) f.counters = &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
  else f.gauges = &prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  families_.emplace(name, f);
  return {};
}

Status Metrics::add(const std::string& name, const Labels& labels, double delta) {
  auto it = families_.find(name);
  GEOLOCO_RETURN_IF(it == families_.end() || it->second.type != Type::counter, Err::invalid_argument, "'", name,
                    "' is not a declared counter");
  GEOLOCO_RETURN_IF(!(delta >= 0), Err::invalid_argument, "counter '", name, "' cannot go down (", delta, ")");
  try {
    it->second.counters->Add(labels_of(labels)).Increment(delta);
  } catch (const std::invalid_argument& e) {  // a label name prometheus-cpp refuses
    return GEOLOCO_ERROR(Err::invalid_argument, "counter '", name, "': ", e.what());
  }
  return {};
}

Status Metrics::set(const std::string& name, const Labels& labels, double value) {
  auto it = families_.find(name);
  GEOLOCO_RETURN_IF(it == families_.end() || it->second.type != Type::gauge, Err::invalid_argument, "'", name,
                    "' is not a declared gauge");
  try {
    it->second.gauges->Add(labels_of(labels)).Set(value);
  } catch (const std::invalid_argument& e) {
    return GEOLOCO_ERROR(Err::invalid_argument, "gauge '", name, "': ", e.what());
  }
  return {};
}

void Metrics::remove(const std::string& name, const Labels& labels) {
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type != Type::gauge) return;
  const auto l = labels_of(labels);
  if (it->second.gauges->Has(l)) it->second.gauges->Remove(&it->second.gauges->Add(l));
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  const auto l = labels_of(labels);
  const Family& f = it->second;
  if (f.counters) return f.counters->Has(l) ? f.counters->Add(l).Value() : 0;
  return f.gauges->Has(l) ? f.gauges->Add(l).Value() : 0;
}

std::string Metrics::render() const {
  // prometheus-cpp keeps a family's series in a hash map: sort families by
  // name and series by labels, so a scrape reads the same from one to the next.
  auto families = registry_->Collect();
  std::sort(families.begin(), families.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (auto& f : families)
    std::sort(f.metric.begin(), f.metric.end(), [](const auto& a, const auto& b) { return a.label < b.label; });
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace geoloco::daemon
