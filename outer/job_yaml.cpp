#include "outer/job_yaml.h"

#include <yaml-cpp/yaml.h>

#include "common/yaml_reader.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace geoloco::outer {

using namespace geoloco::diloco;

namespace {

using yaml::Problems;
using yaml::read_duration;
using yaml::read_enum;
using yaml::read_number;

using KeyReader = std::function<void(const YAML::Node& value, const std::string& what)>;

// Reads one section's map. Keys in `foreign` belong to another component and
// are skipped; with `strict`, any other unknown key is a problem.
void read_section(const YAML::Node& job, const std::string& section, const std::map<std::string, KeyReader>& known,
                  const std::set<std::string>& foreign, bool strict, Problems& p) {
  const YAML::Node node = job[section];
  if (!node || node.IsNull()) return;
  if (!node.IsMap()) {
    p.add(node, cat(section, ": expected a map of options"));
    return;
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.as<std::string>() : std::string();
    auto it = known.find(key);
    if (it != known.end()) {
      it->second(kv.second, cat(section, ".", key));
    } else if (strict && !foreign.count(key)) {
      std::string allowed;
      for (const auto& k : known) allowed += (allowed.empty() ? "" : ", ") + k.first;
      p.add(kv.first, cat(section, ": unknown key '", key, "' (allowed: ", allowed, ")"));
    }
  }
}

}  // namespace

Status OuterJobConfig::validate() const {
  GEOLOCO_TRY(inner.validate());
  GEOLOCO_TRY(outer.validate());
  GEOLOCO_TRY(streaming.validate(inner.steps));
  GEOLOCO_TRY(straggler.validate());
  return {};
}

Result<OuterJobConfig> parse_outer_job_yaml(const YAML::Node& job, std::string_view source) {
  Problems p(source);
  OuterJobConfig c;
  if (!job.IsMap()) {
    p.add(job, "a job file must be a map of sections (name, sites, inner, outer, ...)");
    return p.status();
  }
  // inner: shared with the trainer, so its other keys are not ours to refuse.
  read_section(
      job, "inner",
      {{"steps", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.inner.steps, p); }},
       {"duration", [&](const YAML::Node& v, const std::string& w) { read_duration(v, w, c.inner.duration_s, p); }},
       {"min_steps", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.inner.min_steps, p); }}},
      {}, /*strict=*/false, p);
  read_section(
      job, "outer",
      {{"optimizer",
        [&](const YAML::Node& v, const std::string& w) {
          read_enum<OuterAlgorithm>(v, w, {{"nesterov", OuterAlgorithm::nesterov}, {"sgd", OuterAlgorithm::sgd}},
                                    c.outer.algorithm, p);
        }},
       {"lr", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.outer.learning_rate, p); }},
       {"momentum", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.outer.momentum, p); }},
       {"clip", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.outer.clip_norm, p); }},
       {"weighting",
        [&](const YAML::Node& v, const std::string& w) {
          read_enum<Weighting>(v, w, {{"tokens", Weighting::tokens}, {"uniform", Weighting::uniform}}, c.weighting, p);
        }}},
      {}, /*strict=*/true, p);
  read_section(
      job, "streaming",
      {{"fragments", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.streaming.fragments, p); }},
       {"overlap", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.streaming.overlap_steps, p); }},
       {"alpha", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.streaming.alpha, p); }},
       {"merge",
        [&](const YAML::Node& v, const std::string& w) {
          read_enum<bool>(v, w, {{"replace", false}, {"delayed", true}}, c.streaming.delayed, p);
        }}},
      {}, /*strict=*/true, p);
  // The delayed outer step without an overlap: the longest one, so the
  // exchange has the whole next phase (H − 1 steps; H/F with fragments).
  if (c.streaming.delayed && !(job["streaming"] && job["streaming"]["overlap"]) && c.inner.steps > 1)
    c.streaming.overlap_steps = diloco::delayed_overlap(c.inner.steps, c.streaming.fragments);
  read_section(
      job, "straggler",
      {{"policy",
        [&](const YAML::Node& v, const std::string& w) {
          read_enum<StragglerPolicy>(v, w, {{"carry", StragglerPolicy::carry}, {"drop", StragglerPolicy::drop}},
                                     c.straggler.policy, p);
        }},
       {"decay", [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.straggler.decay, p); }},
       {"max_rounds_late",
        [&](const YAML::Node& v, const std::string& w) { read_number(v, w, c.straggler.max_rounds_late, p); }}},
      {"deadline", "min_sites"}, /*strict=*/true, p);
  if (!p.empty()) return p.status();
  // Range rules, reported at the section they concern.
  Status valid = c.validate();
  if (!valid.ok()) {
    const std::string& m = valid.message();
    const char* section = m.starts_with("outer")       ? "outer"
                          : m.starts_with("streaming") ? "streaming"
                          : m.starts_with("straggler") ? "straggler"
                                                       : "inner";
    const YAML::Node at = job[section] ? job[section] : job;
    p.add(at, m);
    return p.status();
  }
  return c;
}

Result<OuterJobConfig> load_outer_job_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  GEOLOCO_RETURN_IF(!in, Err::io, "cannot read job file ", path.string());
  try {
    return parse_outer_job_yaml(YAML::Load(in), path.string());
  } catch (const YAML::Exception& e) {
    return GEOLOCO_ERROR(Err::invalid_argument, path.string(), ":", e.mark.line + 1, ":", e.mark.column + 1, ": ",
                         e.msg);
  }
}

}  // namespace geoloco::outer
