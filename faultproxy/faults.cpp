#include "faultproxy/faults.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

#include "common/units.h"
#include "common/yaml_reader.h"

namespace geoloco::faultproxy {

bool LinkFaults::flapping_down(double t) const {
  if (flap_period_s <= 0 || t < flap_since_s) return false;
  return std::fmod(t - flap_since_s, flap_period_s) < flap_down_s;
}

void FaultChange::apply(LinkFaults& faults, double at) const {
  for (const auto& edit : edits) edit(faults, at);
}

namespace {

using Edit = std::function<void(LinkFaults&, double)>;
using Pick = DirectionFaults& (*)(LinkFaults&);

bool read_bool(const YAML::Node& v, const std::string& what, bool& out, yaml::Problems& p) {
  try {
    if (v.IsScalar()) {
      out = v.as<bool>();
      return true;
    }
  } catch (const YAML::Exception&) {
  }
  p.add(v, cat(what, ": expected true or false"));
  return false;
}

// A size in bytes, or 0 for "off".
bool read_bytes_or_off(const YAML::Node& v, const std::string& what, std::uint64_t& out, yaml::Problems& p) {
  std::string text;
  if (!yaml::read_string(v, what, text, p)) return false;
  if (text == "0") {
    out = 0;
    return true;
  }
  auto size = parse_size(text);
  if (!size.ok()) {
    p.add(v, cat(what, ": ", size.status().message(), ", or 0 for off"));
    return false;
  }
  out = *size;
  return true;
}

// The fields of one direction, each an edit applied to every direction `picks` names.
void parse_direction(const YAML::Node& node, const std::string& what, const std::vector<Pick>& picks,
                     FaultChange& change, yaml::Problems& p) {
  if (!node.IsMap()) {
    p.add(node, cat(what,
                    ": expected a mapping of latency, jitter, rate, slice, slice_delay, close_after, "
                    "blackhole, partition"));
    return;
  }
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    const auto field = cat(what, ".", key);
    const YAML::Node& v = kv.second;
    auto each = [&](auto set) {
      for (Pick pick : picks) change.edits.push_back([pick, set](LinkFaults& f, double) { set(pick(f)); });
    };
    auto word = v.IsScalar() ? v.as<std::string>() : std::string("?");
    if (key == "latency" || key == "jitter" || key == "slice_delay") {
      double s = 0;
      if (!yaml::read_duration(v, field, s, p)) continue;
      if (key == "latency") each([s](DirectionFaults& d) { d.latency_s = s; });
      if (key == "jitter") each([s](DirectionFaults& d) { d.jitter_s = s; });
      if (key == "slice_delay") each([s](DirectionFaults& d) { d.slice_delay_s = s; });
    } else if (key == "rate") {
      std::string text;
      if (!yaml::read_string(v, field, text, p)) continue;
      auto rate = parse_rate_cap(text);
      if (!rate.ok()) {
        p.add(v, cat(field, ": ", rate.status().message()));
        continue;
      }
      const double bps = *rate;
      each([bps](DirectionFaults& d) { d.rate_bps = bps; });
    } else if (key == "slice" || key == "close_after") {
      std::uint64_t n = 0;
      if (!read_bytes_or_off(v, field, n, p)) continue;
      if (key == "slice") each([n](DirectionFaults& d) { d.slice_bytes = n; });
      else each([n](DirectionFaults& d) { d.close_after_bytes = n; });
    } else if (key == "blackhole" || key == "partition") {
      bool b = false;
      if (!read_bool(v, field, b, p)) continue;
      if (key == "blackhole") each([b](DirectionFaults& d) { d.blackhole = b; });
      else each([b](DirectionFaults& d) { d.partition = b; });
    } else {
      p.add(kv.first, cat(field,
                          ": unknown fault (expected latency, jitter, rate, slice, slice_delay, close_after, "
                          "blackhole or partition)"));
      continue;
    }
    change.text += cat(change.text.empty() ? "" : " ", field, "=", word);
  }
}

DirectionFaults& up(LinkFaults& f) { return f.up; }
DirectionFaults& down(LinkFaults& f) { return f.down; }

}  // namespace

FaultChange parse_change(const YAML::Node& node, const std::string& what, yaml::Problems& p,
                         const std::vector<std::string>& ignore) {
  FaultChange change;
  if (!node.IsMap()) {
    p.add(node, cat(what, ": expected a mapping (up, down, both, refuse, flap, clear, reset)"));
    return change;
  }
  for (const auto& kv : node) {
    const auto key = kv.first.as<std::string>();
    if (std::find(ignore.begin(), ignore.end(), key) != ignore.end()) continue;
    const YAML::Node& v = kv.second;
    const auto field = what.empty() ? key : cat(what, ".", key);
    if (key == "up") parse_direction(v, key, {&up}, change, p);
    else if (key == "down") parse_direction(v, key, {&down}, change, p);
    else if (key == "both") parse_direction(v, key, {&up, &down}, change, p);
    else if (key == "refuse") {
      bool b = false;
      if (!read_bool(v, field, b, p)) continue;
      change.edits.push_back([b](LinkFaults& f, double) { f.refuse = b; });
      change.text += cat(change.text.empty() ? "" : " ", "refuse=", b ? "true" : "false");
    } else if (key == "clear" || key == "reset") {
      bool b = false;
      if (!read_bool(v, field, b, p)) continue;
      (key == "clear" ? change.clear : change.reset) = b;
      if (b) change.text += cat(change.text.empty() ? "" : " ", key);
    } else if (key == "flap") {
      double period = 0, down_s = 0;
      bool ok = v.IsMap() && v["period"] && v["down"];
      if (!ok) {
        p.add(v, cat(field, ": expected {period: DURATION, down: DURATION} (period 0 stops the flapping)"));
        continue;
      }
      // Both read (each reports its own problem) before giving up.
      const bool period_ok = yaml::read_duration(v["period"], field + ".period", period, p);
      const bool down_ok = yaml::read_duration(v["down"], field + ".down", down_s, p);
      if (!period_ok || !down_ok) continue;
      if (period > 0 && !(down_s < period)) {
        p.add(v, cat(field, ": down (", down_s, " s) must be shorter than the period (", period, " s)"));
        continue;
      }
      change.edits.push_back([period, down_s](LinkFaults& f, double at) {
        f.flap_period_s = period;
        f.flap_down_s = period > 0 ? down_s : 0;
        f.flap_since_s = at;
      });
      change.text += cat(change.text.empty() ? "" : " ", "flap=", period, "s/", down_s, "s");
    } else {
      p.add(kv.first, cat(field, ": unknown key (expected up, down, both, refuse, flap, clear or reset)"));
    }
  }
  return change;
}

std::string describe(const LinkFaults& f) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  auto direction = [&](const char* name, const DirectionFaults& d) {
    if (d.latency_s > 0) add(cat(name, ".latency=", d.latency_s * 1e3, "ms"));
    if (d.jitter_s > 0) add(cat(name, ".jitter=", d.jitter_s * 1e3, "ms"));
    if (d.rate_bps > 0) add(cat(name, ".rate=", d.rate_bps, "bit/s"));
    if (d.slice_bytes > 0) add(cat(name, ".slice=", d.slice_bytes, "B/", d.slice_delay_s * 1e3, "ms"));
    if (d.close_after_bytes > 0) add(cat(name, ".close_after=", d.close_after_bytes, "B"));
    if (d.blackhole) add(cat(name, ".blackhole"));
    if (d.partition) add(cat(name, ".partition"));
  };
  direction("up", f.up);
  direction("down", f.down);
  if (f.refuse) add("refuse");
  if (f.flap_period_s > 0) add(cat("flap=", f.flap_period_s, "s/", f.flap_down_s, "s"));
  return out.empty() ? "none" : out;
}

}  // namespace geoloco::faultproxy
