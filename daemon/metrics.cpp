#include "daemon/metrics.h"

#include <cmath>
#include <iomanip>
#include <sstream>

namespace geoloco::daemon {

namespace {
bool valid_name(const std::string& name) {
  if (name.rfind("geoloco_", 0) != 0) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream out;
  out << std::setprecision(17) << v;
  return out.str();
}
}  // namespace

std::string escape_label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Status Metrics::declare(const std::string& name, Type type, const std::string& help) {
  GEOLOCO_RETURN_IF(!valid_name(name), Err::invalid_argument, "metric '", name,
                    "': names start with geoloco_ and use only a-z, 0-9 and _");
  GEOLOCO_RETURN_IF(type == Type::counter && (name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0),
                    Err::invalid_argument, "counter '", name, "' must end in _total");
  auto [it, inserted] = families_.try_emplace(name, Family{type, help, {}});
  GEOLOCO_RETURN_IF(!inserted && it->second.type != type, Err::invalid_argument, "metric '", name,
                    "' was declared with another type");
  return {};
}

Status Metrics::add(const std::string& name, const Labels& labels, double delta) {
  auto it = families_.find(name);
  GEOLOCO_RETURN_IF(it == families_.end() || it->second.type != Type::counter, Err::invalid_argument, "'", name,
                    "' is not a declared counter");
  GEOLOCO_RETURN_IF(!(delta >= 0), Err::invalid_argument, "counter '", name, "' cannot go down (", delta, ")");
  it->second.samples[labels] += delta;
  return {};
}

Status Metrics::set(const std::string& name, const Labels& labels, double value) {
  auto it = families_.find(name);
  GEOLOCO_RETURN_IF(it == families_.end() || it->second.type != Type::gauge, Err::invalid_argument, "'", name,
                    "' is not a declared gauge");
  it->second.samples[labels] = value;
  return {};
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.samples.find(labels);
  return s == it->second.samples.end() ? 0 : s->second;
}

std::string Metrics::render() const {
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += f.help;
    out += "\n# TYPE ";
    out += name;
    out += f.type == Type::counter ? " counter\n" : " gauge\n";
    for (const auto& [labels, v] : f.samples) {
      out += name;
      if (!labels.empty()) {
        out += "{";
        for (std::size_t i = 0; i < labels.size(); ++i) {
          // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on a chain of operator+.
          if (i > 0) out += ',';
          out += labels[i].first;
          out += "=\"";
          out += escape_label_value(labels[i].second);
          out += '"';
        }
        out += "}";
      }
      out += ' ';
      out += number(v);
      out += '\n';
    }
  }
  return out;
}

}  // namespace geoloco::daemon
