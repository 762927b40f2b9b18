#include "common/yaml_reader.h"

#include <fstream>
#include <sstream>

namespace geoloco::yaml {

void Problems::add(const YAML::Node& at, const std::string& what) { add(at.Mark(), what); }

void Problems::add(const YAML::Mark& mark, const std::string& what) {
  lines_.push_back(cat(source_, ":", mark.line + 1, ":", mark.column + 1, ": ", what));
}

Status Problems::status() const {
  std::string all;
  for (const auto& l : lines_) all += (all.empty() ? "" : "\n") + l;
  return Status(Err::invalid_argument, all);
}

bool read_string(const YAML::Node& v, const std::string& what, std::string& out, Problems& p) {
  if (!v.IsScalar()) {
    p.add(v, cat(what, ": expected a string"));
    return false;
  }
  out = v.as<std::string>();
  return true;
}

bool read_duration(const YAML::Node& v, const std::string& what, double& seconds, Problems& p) {
  if (v.IsScalar()) {
    std::string text = v.as<std::string>();
    double scale = 1.0;
    if (text.size() > 2 && text.compare(text.size() - 2, 2, "ms") == 0) {
      scale = 1e-3;
      text.resize(text.size() - 2);
    } else if (!text.empty() &&
               (text.back() == 's' || text.back() == 'm' || text.back() == 'h' || text.back() == 'd')) {
      scale = text.back() == 's' ? 1.0 : text.back() == 'm' ? 60.0 : text.back() == 'h' ? 3600.0 : 86400.0;
      text.pop_back();
    }
    std::istringstream in(text);
    double x = 0;
    if (!text.empty() && (in >> x) && in.eof() && std::isfinite(x) && x >= 0) {
      // Ten years at most: no setting needs more, and every caller can hold it.
      if (x * scale > 3650.0 * 86400) {
        p.add(v, cat(what, ": ", v.as<std::string>(), " is too long (at most 3650d)"));
        return false;
      }
      seconds = x * scale;
      return true;
    }
  }
  p.add(v, cat(what, ": expected a duration such as 90s, 1.5m, 2h or 250ms (a bare number is seconds)"));
  return false;
}

Result<YAML::Node> load_file(const std::string& path) {
  std::ifstream in(path);
  GEOLOCO_RETURN_IF(!in, Err::io, "cannot read ", path);
  try {
    return YAML::Load(in);
  } catch (const YAML::Exception& e) {
    return GEOLOCO_ERROR(Err::invalid_argument, path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg);
  }
}

Result<YAML::Node> load_text(std::string_view text, std::string_view source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return GEOLOCO_ERROR(Err::invalid_argument, source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg);
  }
}

}  // namespace geoloco::yaml
