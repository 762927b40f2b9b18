#include "job/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <map>

#include "common/yaml_reader.h"
#include "compression/pipeline_yaml.h"
#include "common/site_name.h"

namespace geoloco::job {

namespace {

using yaml::Problems;

// Keys of a section, read by `readers`; anything else is refused, except the
// keys another component reads from the same section (`foreign`).
using Reader = std::function<void(const YAML::Node&, const std::string&)>;
void read_map(const YAML::Node& node, const std::string& section, const std::map<std::string, Reader>& readers,
              const std::set<std::string>& foreign, Problems& p) {
  if (!node || node.IsNull()) return;
  if (!node.IsMap()) {
    p.add(node, cat(section, ": expected a map of options"));
    return;
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.as<std::string>() : "";
    auto it = readers.find(key);
    if (it != readers.end()) {
      it->second(kv.second, cat(section, ".", key));
    } else if (!foreign.count(key)) {
      std::string allowed;
      for (const auto& [k, r] : readers) allowed += (allowed.empty() ? "" : ", ") + k;
      for (const auto& k : foreign) allowed += ", " + k;
      p.add(kv.first, cat(section, ": unknown key '", key, "' (allowed: ", allowed, ")"));
    }
  }
}

}  // namespace

Result<JobSpec> parse_job_yaml(const YAML::Node& doc, std::string_view source, const std::set<std::string>& known) {
  Problems p(source);
  JobSpec j;
  if (!doc.IsMap()) {
    p.add(doc, "a job file is a map (name, sites, coordinator, trainer, inner, outer, ...)");
    return p.status();
  }
  std::vector<std::string> extra;  // messages that carry their own position
  static const std::set<std::string> top{"name",  "sites",       "coordinator", "seed",      "trainer",    "inner",
                                         "outer", "compression", "streaming",   "straggler", "checkpoint", "stop"};
  for (const auto& kv : doc) {
    const std::string key = kv.first.IsScalar() ? kv.first.as<std::string>() : "";
    if (!top.count(key)) {
      std::string allowed;
      for (const auto& k : top) allowed += (allowed.empty() ? "" : ", ") + k;
      p.add(kv.first, cat("unknown key '", key, "' (allowed: ", allowed, ")"));
    }
  }
  if (!doc["name"]) p.add(doc, "name: missing; a job needs a name");
  else if (yaml::read_string(doc["name"], "name", j.name, p) && j.name.empty()) p.add(doc["name"], "name: empty");

  if (!doc["sites"] || !doc["sites"].IsSequence() || doc["sites"].size() == 0) {
    p.add(doc["sites"] ? doc["sites"] : doc, "sites: expected a list of the sites that train, e.g. [a, b]");
  } else {
    std::set<std::string> seen;
    for (const auto& s : doc["sites"]) {
      std::string name;
      if (!yaml::read_string(s, "sites", name, p)) continue;
      if (!seen.insert(name).second) {
        p.add(s, cat("sites: '", name, "' is listed twice"));
        continue;
      }
      j.sites.push_back(name);
      if (const std::string problem = site_name_problem(name); !problem.empty()) {
        p.add(s, "sites: " + problem);
      } else if (!known.empty() && !known.count(name)) {
        std::string fed;
        for (const auto& k : known) fed += (fed.empty() ? "" : ", ") + k;
        p.add(s, cat("sites: '", name, "' is not a site of this federation (known: ", fed, ")"));
      }
    }
  }
  if (!doc["coordinator"]) p.add(doc, "coordinator: missing; name the site that runs the rounds");
  else if (yaml::read_string(doc["coordinator"], "coordinator", j.coordinator, p) && !j.sites.empty() &&
           std::find(j.sites.begin(), j.sites.end(), j.coordinator) == j.sites.end())
    p.add(doc["coordinator"], cat("coordinator: '", j.coordinator, "' is not one of the job's sites"));
  if (doc["seed"]) yaml::read_number(doc["seed"], "seed", j.seed, p);

  auto& t = j.trainer;
  read_map(
      doc["trainer"], "trainer",
      {{"kind",
        [&](const YAML::Node& v, const std::string& w) {
          yaml::read_enum(v, w,
                          std::map<std::string, TrainerSpec::Kind>{{"builtin", TrainerSpec::Kind::builtin},
                                                                   {"external", TrainerSpec::Kind::external},
                                                                   {"command", TrainerSpec::Kind::command}},
                          t.kind, p);
        }},
       {"command",
        [&](const YAML::Node& v, const std::string& w) {
          if (!v.IsSequence() || v.size() == 0) {
            p.add(v, w + ": expected the program and its arguments as a list, e.g. [python3, train.py]");
            return;
          }
          for (const auto& arg : v) {
            std::string s;
            if (yaml::read_string(arg, w, s, p)) t.command.push_back(s);
          }
          if (!t.command.empty() && t.command.front().empty()) p.add(v, w + ": the program is empty");
        }},
       {"model",
        [&](const YAML::Node& v, const std::string& w) {
          yaml::read_enum(v, w, std::map<std::string, std::string>{{"mlp", "mlp"}, {"gpt", "gpt"}}, t.model, p);
        }},
       {"layers", [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, t.layers, p); }},
       {"width", [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, t.width, p); }},
       {"heads", [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, t.heads, p); }},
       {"context", [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, t.context, p); }},
       {"workers", [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, t.workers, p); }},
       {"data",
        [&](const YAML::Node& v, const std::string& w) {
          yaml::read_enum(
              v, w, std::map<std::string, std::string>{{"contiguous", "contiguous"}, {"interleaved", "interleaved"}},
              t.data, p);
        }},
       {"eval_rounds",
        [&](const YAML::Node& v, const std::string& w) {
          if (yaml::read_number(v, w, t.eval_rounds, p) && t.eval_rounds < 1)
            p.add(v, w + ": must be at least 1 (1 evaluates every round's anchor)");
        }},
       {"eval_items", [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, t.eval_items, p); }}},
      {}, p);
  if (doc["trainer"]) {
    const YAML::Node& at = doc["trainer"];
    // Only a map has keys to look up (yaml-cpp throws on a scalar's operator[]); read_map reported the rest.
    const bool has_command = at.IsMap() && at["command"];
    if (t.kind == TrainerSpec::Kind::command && t.command.empty() && !has_command)
      p.add(at, "trainer: kind command needs command: [program, arguments...], the trainer geolocod starts");
    else if (t.kind != TrainerSpec::Kind::command && has_command)
      p.add(at["command"], "trainer.command: only a trainer of kind command runs a command");
    if (t.layers < 1 || t.width < 1 || t.heads < 1 || t.context < 1 || t.workers < 1)
      p.add(at, "trainer: layers, width, heads, context and workers must each be at least 1");
    else if (t.model == "gpt" && t.width % t.heads != 0)
      p.add(at, cat("trainer: width (", t.width, ") must be a multiple of heads (", t.heads, ")"));
  }

  auto& in = j.inner;
  read_map(doc["inner"], "inner",
           {{"optimizer",
             [&](const YAML::Node& v, const std::string& w) {
               yaml::read_enum(v, w, std::map<std::string, std::string>{{"adamw", "adamw"}}, in.optimizer, p);
             }},
            {"lr",
             [&](const YAML::Node& v, const std::string& w) {
               if (yaml::read_number(v, w, in.lr, p) && !(in.lr > 0)) p.add(v, w + ": must be > 0");
             }},
            {"batch",
             [&](const YAML::Node& v, const std::string& w) {
               if (yaml::read_number(v, w, in.batch, p) && in.batch == 0) p.add(v, w + ": must be at least 1");
             }},
            {"warmup", [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, in.warmup, p); }},
            {"weight_decay",
             [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, in.weight_decay, p); }},
            {"clip", [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, in.clip, p); }},
            {"phase_warmup",
             [&](const YAML::Node& v, const std::string& w) { yaml::read_number(v, w, in.phase_warmup, p); }}},
           {"steps", "duration", "min_steps"}, p);

  auto outer_config = outer::parse_outer_job_yaml(doc, source);
  if (outer_config.ok()) j.outer = *outer_config;
  else extra.push_back(outer_config.status().message());

  if (doc["compression"]) {
    auto pipeline = compression::parse_pipeline_yaml(doc["compression"], source);
    if (pipeline.ok()) j.compression = *pipeline;
    else extra.push_back(pipeline.status().message());
  }

  double deadline_s = j.quorum.deadline_ms.count() / 1000.0;
  read_map(doc["straggler"], "straggler",
           {{"deadline", [&](const YAML::Node& v, const std::string& w) { yaml::read_duration(v, w, deadline_s, p); }},
            {"min_sites",
             [&](const YAML::Node& v, const std::string& w) {
               if (yaml::read_number(v, w, j.quorum.min_sites, p) && j.quorum.min_sites < 1)
                 p.add(v, w + ": must be at least 1");
               else if (!j.sites.empty() && j.quorum.min_sites > static_cast<int>(j.sites.size()))
                 p.add(v, cat(w, ": ", j.quorum.min_sites, " is more than the job's ", j.sites.size(), " sites"));
             }}},
           {"policy", "decay", "max_rounds_late"}, p);
  j.quorum.deadline_ms = diloco::Millis(static_cast<long long>(deadline_s * 1000 + 0.5));

  read_map(doc["checkpoint"], "checkpoint",
           {{"every_rounds",
             [&](const YAML::Node& v, const std::string& w) {
               if (yaml::read_number(v, w, j.checkpoint_every_rounds, p) && j.checkpoint_every_rounds == 0)
                 p.add(v, w + ": must be at least 1");
             }}},
           {}, p);

  std::uint64_t rounds = 0, tokens = 0;
  read_map(doc["stop"], "stop",
           {{"rounds",
             [&](const YAML::Node& v, const std::string& w) {
               if (yaml::read_number(v, w, rounds, p)) j.stop_rounds = rounds;
             }},
            {"tokens",
             [&](const YAML::Node& v, const std::string& w) {
               if (yaml::read_number(v, w, tokens, p)) j.stop_tokens = tokens;
             }}},
           {}, p);
  // A per-phase warmup ramps the inner lr over the first steps of each phase
  // of H steps; a time-based phase has no H to count them in.
  if (in.phase_warmup > 0 && outer_config.ok()) {
    const YAML::Node at = doc["inner"]["phase_warmup"];
    if (j.outer.inner.duration_s > 0)
      p.add(at, "inner.phase_warmup: needs inner.steps (phases of H steps), not inner.duration");
    else if (in.phase_warmup > j.outer.inner.steps)
      p.add(at, cat("inner.phase_warmup: ", in.phase_warmup,
                    " steps is more than a phase (inner.steps = ", j.outer.inner.steps, ")"));
  }
  if (!doc["stop"]) p.add(doc, "stop: missing; say when the job ends, e.g. stop: {rounds: 20}");
  else if (!j.stop_rounds && !j.stop_tokens && doc["stop"].IsMap())
    p.add(doc["stop"], "stop: expected rounds or tokens");

  // How geolocod runs Streaming DiLoCo (README "Streaming"): each round syncs
  // one fragment after H/F steps, so the phases are counted in steps, and a
  // fragment's exchange must be merged before the next fragment syncs.
  if (const auto& st = j.outer.streaming; doc["streaming"] && outer_config.ok()) {
    const std::uint64_t h = j.outer.inner.steps;
    if (st.fragments > 1 && j.outer.inner.duration_s > 0)
      p.add(doc["streaming"], cat("streaming: ", st.fragments, " fragments need inner.steps: a fragment syncs every ",
                                  "H/F inner steps, and inner.duration does not say how many steps a round has"));
    else if (st.fragments > 1 && h > 0 && st.overlap_steps > h / st.fragments)
      p.add(doc["streaming"],
            cat("streaming: overlap ", st.overlap_steps, " is more than H/F = ", h, "/", st.fragments, " = ",
                h / st.fragments, " steps; a fragment's exchange must end before the next fragment syncs"));
    if (st.delayed && j.outer.inner.duration_s > 0)
      p.add(doc["streaming"],
            "streaming: merge: delayed needs inner.steps: the exchange overlaps the next phase's "
            "steps, and inner.duration does not say how many it has");
    // An external trainer streams too: WELCOME carries the plan (geoloco.torch follows it).
  }

  if (p.empty() && extra.empty()) return j;
  std::string all = p.empty() ? "" : p.status().message();
  for (const auto& e : extra) all += (all.empty() ? "" : "\n") + e;
  return Status(Err::invalid_argument, all);
}

Result<JobSpec> load_job_file(const std::string& path, const std::set<std::string>& known_sites) {
  auto doc = yaml::load_file(path);
  if (!doc.ok()) return doc.status();
  return parse_job_yaml(*doc, path, known_sites);
}

}  // namespace geoloco::job
