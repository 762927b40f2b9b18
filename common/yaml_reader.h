// Reading configuration YAML the same way everywhere (job files, site files,
// pipelines): problems are collected, not thrown, and reported together,
// each as "source:line:column: what was expected". Its own small library
// (geoloco_yaml) so that common/ itself does not need yaml-cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace geoloco::yaml {

/// Collects every problem of one document.
class Problems {
 public:
  explicit Problems(std::string_view source) : source_(source) {}
  /// Records `what` at `at`'s line and column.
  void add(const YAML::Node& at, const std::string& what);
  /// Records `what` at a mark (e.g. from a YAML::Exception).
  void add(const YAML::Mark& mark, const std::string& what);
  bool empty() const { return lines_.empty(); }
  const std::string& source() const { return source_; }
  /// invalid_argument with every problem, one per line.
  Status status() const;

 private:
  std::string source_;
  std::vector<std::string> lines_;
};

/// Reads a number (or integer) scalar into `out`; records a problem otherwise.
template <class T>
bool read_number(const YAML::Node& v, const std::string& what, T& out, Problems& p) {
  try {
    if (!v.IsScalar()) throw YAML::Exception(v.Mark(), "");
    T value = v.as<T>();
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(value)) throw YAML::Exception(v.Mark(), "");
    }
    out = value;
    return true;
  } catch (const YAML::Exception&) {
    p.add(v, cat(what, ": expected ",
                 std::is_floating_point_v<T> ? "a number"
                                             : (std::is_unsigned_v<T> ? "a non-negative integer" : "an integer")));
    return false;
  }
}

/// Reads a string scalar into `out`; records a problem otherwise.
bool read_string(const YAML::Node& v, const std::string& what, std::string& out, Problems& p);

/// Reads one of `names` into `out`; records "expected a or b" otherwise.
template <class E>
bool read_enum(const YAML::Node& v, const std::string& what, const std::map<std::string, E>& names, E& out,
               Problems& p) {
  if (v.IsScalar()) {
    auto it = names.find(v.as<std::string>());
    if (it != names.end()) {
      out = it->second;
      return true;
    }
  }
  std::string allowed;
  for (const auto& [k, e] : names) allowed += (allowed.empty() ? "" : " or ") + k;
  p.add(v, cat(what, ": expected ", allowed));
  return false;
}

/// "90", "90s", "1.5m", "2h", "250ms" -> seconds; records a problem otherwise.
bool read_duration(const YAML::Node& v, const std::string& what, double& seconds, Problems& p);

/// Parses a file. Errors: io (unreadable), invalid_argument (syntax, with line and column).
Result<YAML::Node> load_file(const std::string& path);
/// Parses text. Errors: invalid_argument (syntax).
Result<YAML::Node> load_text(std::string_view text, std::string_view source);

}  // namespace geoloco::yaml
