#include "compression/pipeline_yaml.h"

#include <yaml-cpp/yaml.h>

#include "common/yaml_reader.h"

#include <functional>
#include <map>
#include <vector>

namespace geoloco::compression {

namespace {

using yaml::Problems;

template <class T>
bool read_scalar(const YAML::Node& node, const std::string& what, T& out, Problems& problems) {
  return yaml::read_number(node, what, out, problems);
}

using ParamReader = std::function<void(const YAML::Node& value, const std::string& key, Problems&)>;

// Reads the options map of one codec, refusing unknown keys.
void read_params(const YAML::Node& params, const std::string& codec, const std::map<std::string, ParamReader>& known,
                 Problems& problems) {
  if (!params || params.IsNull()) return;
  if (known.empty()) {
    problems.add(params, cat(codec, " takes no options"));
    return;
  }
  if (!params.IsMap()) {
    problems.add(params, cat(codec, ": expected a map of options, e.g. {", known.begin()->first, ": ...}"));
    return;
  }
  for (const auto& kv : params) {
    const auto key = kv.first.as<std::string>();
    auto it = known.find(key);
    if (it == known.end()) {
      std::string allowed;
      for (const auto& k : known) allowed += (allowed.empty() ? "" : ", ") + k.first;
      problems.add(kv.first, cat(codec, ": unknown option '", key, "' (allowed: ", allowed, ")"));
      continue;
    }
    it->second(kv.second, cat(codec, ".", key), problems);
  }
}

void read_stage(const YAML::Node& item, PipelineSpec& spec, Problems& problems) {
  std::string name;
  YAML::Node params;
  YAML::Node at = item;
  if (item.IsScalar()) {
    name = item.as<std::string>();
  } else if (item.IsMap() && item.size() == 1) {
    auto kv = *item.begin();
    name = kv.first.as<std::string>();
    // Node::operator= writes through to the node it refers to; reset() rebinds.
    params.reset(kv.second);
    at.reset(kv.first);
  } else {
    problems.add(item, "expected a codec: a name (fp16, bf16, quantize, topk, zstd) or {name: {options}}");
    return;
  }

  if (name == "fp16" || name == "bf16") {
    read_params(params, name, {}, problems);
    spec.stages.push_back(name == "fp16" ? StageSpec(Fp16Spec{}) : StageSpec(Bf16Spec{}));
  } else if (name == "quantize") {
    QuantizeSpec q;
    read_params(
        params, name,
        {{"bits", [&](const YAML::Node& v, const std::string& w, Problems& p) { read_scalar(v, w, q.bits, p); }},
         {"block", [&](const YAML::Node& v, const std::string& w, Problems& p) { read_scalar(v, w, q.block, p); }},
         {"rounding",
          [&](const YAML::Node& v, const std::string& w, Problems& p) {
            std::string r;
            if (!v.IsScalar() || ((r = v.as<std::string>()) != "nearest" && r != "stochastic")) {
              p.add(v, w + ": expected nearest or stochastic");
              return;
            }
            q.rounding = r == "nearest" ? Rounding::nearest : Rounding::stochastic;
          }}},
        problems);
    spec.stages.push_back(q);
  } else if (name == "topk") {
    TopkSpec t;
    read_params(
        params, name,
        {{"density", [&](const YAML::Node& v, const std::string& w, Problems& p) { read_scalar(v, w, t.density, p); }},
         {"block", [&](const YAML::Node& v, const std::string& w, Problems& p) { read_scalar(v, w, t.block, p); }}},
        problems);
    spec.stages.push_back(t);
  } else if (name == "zstd") {
    ZstdSpec z;
    read_params(
        params, name,
        {{"level", [&](const YAML::Node& v, const std::string& w, Problems& p) { read_scalar(v, w, z.level, p); }}},
        problems);
    spec.stages.push_back(z);
  } else {
    problems.add(at, cat("unknown codec '", name, "' (known: fp16, bf16, quantize, topk, zstd)"));
    return;
  }
  // Range rules of this one stage, reported at the stage.
  Status valid = validate(PipelineSpec{{spec.stages.back()}});
  if (!valid.ok()) problems.add(at, valid.message());
}

}  // namespace

namespace {
Result<PipelineSpec> parse_pipeline_node(const YAML::Node& node, std::string_view source) {
  Problems problems(source);
  PipelineSpec spec;
  YAML::Node list = node;
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const auto key = kv.first.as<std::string>();
      if (key == "pipeline") {
        list.reset(kv.second);  // rebind; operator= would overwrite `node`
      } else if (key == "error_feedback") {
        const std::string v = kv.second.IsScalar() ? kv.second.as<std::string>() : "";
        if (v == "auto") spec.error_feedback = ErrorFeedbackMode::automatic;
        else if (v == "on" || v == "true") spec.error_feedback = ErrorFeedbackMode::on;
        else if (v == "off" || v == "false") spec.error_feedback = ErrorFeedbackMode::off;
        else problems.add(kv.second, "error_feedback: expected auto, on or off");
      } else {
        problems.add(kv.first, cat("unknown key '", key, "' (allowed: pipeline, error_feedback)"));
      }
    }
    if (list.IsMap()) {
      problems.add(node, "compression: expected a 'pipeline' list of codecs");
      return problems.status();
    }
  }
  if (!list.IsSequence()) {
    problems.add(list, "expected a list of codecs, e.g. [{topk: {density: 0.01}}, {quantize: {bits: 4}}, zstd]");
    return problems.status();
  }
  for (const auto& item : list) read_stage(item, spec, problems);
  if (problems.empty()) {
    Status valid = validate(spec);
    if (!valid.ok()) problems.add(list, valid.message());
  }
  if (!problems.empty()) return problems.status();
  return spec;
}

}  // namespace

Result<PipelineSpec> parse_pipeline_yaml(const YAML::Node& node, std::string_view source) {
  try {
    return parse_pipeline_node(node, source);
  } catch (const YAML::Exception& e) {  // e.g. a key that is itself a list
    return GEOLOCO_ERROR(Err::invalid_argument, source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg);
  }
}

Result<PipelineSpec> parse_pipeline_text(std::string_view text, std::string_view source) {
  try {
    return parse_pipeline_yaml(YAML::Load(std::string(text)), source);
  } catch (const YAML::Exception& e) {
    return GEOLOCO_ERROR(Err::invalid_argument, source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg);
  }
}

}  // namespace geoloco::compression
