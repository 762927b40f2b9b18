#include "faultproxy/config.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "common/units.h"
#include "common/yaml_reader.h"

namespace geoloco::faultproxy {

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

namespace {

bool read_address(const YAML::Node& v, const std::string& what, HostPort& out, yaml::Problems& p) {
  std::string text;
  if (!yaml::read_string(v, what, text, p)) return false;
  auto hp = parse_host_port(text);
  if (!hp.ok()) {
    p.add(v, cat(what, ": ", hp.status().message()));
    return false;
  }
  out = *hp;
  return true;
}

Result<ProxyConfig> parse_root(const YAML::Node& root, std::string_view source) {
  yaml::Problems p(source);
  ProxyConfig config;
  if (!root.IsMap()) {
    p.add(root, "expected a mapping with links (and control, seed, window, schedule)");
    return p.status();
  }
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    if (key != "control" && key != "seed" && key != "window" && key != "links" && key != "schedule")
      p.add(kv.first, cat(key, ": unknown key (expected control, seed, window, links, schedule)"));
  }
  if (root["control"]) {
    HostPort control;
    if (read_address(root["control"], "control", control, p)) {
      if (!is_loopback(control.host))
        p.add(root["control"], cat("control: '", control.host,
                                   "' is not a loopback address; the control API has no authentication, so it "
                                   "listens on 127.0.0.1 or ::1 only"));
      config.control = control;
    }
  }
  if (root["seed"]) yaml::read_number(root["seed"], "seed", config.seed, p);
  if (root["window"]) {
    std::string text;
    if (yaml::read_string(root["window"], "window", text, p)) {
      auto size = parse_size(text);
      if (size.ok()) config.window_bytes = *size;
      else p.add(root["window"], cat("window: ", size.status().message()));
    }
  }
  std::set<std::string> names;
  const YAML::Node links = root["links"];
  if (!links || !links.IsSequence() || links.size() == 0) {
    p.add(links ? links : root, "links: expected a list of {name, listen, connect, and faults}");
  } else {
    for (std::size_t i = 0; i < links.size(); ++i) {
      const YAML::Node l = links[i];
      const auto what = cat("links[", i, "]");
      if (!l.IsMap()) {
        p.add(l, cat(what, ": expected a mapping with name, listen, connect"));
        continue;
      }
      LinkConfig link;
      bool ok = true;
      for (const char* need : {"name", "listen", "connect"})
        if (!l[need]) {
          p.add(l, cat(what, ": ", need, " is missing"));
          ok = false;
        }
      if (!ok) continue;
      if (yaml::read_string(l["name"], what + ".name", link.name, p)) {
        if (link.name.empty() || link.name == "*")
          p.add(l["name"], cat(what, ".name: '", link.name, "' is not a link name"));
        else if (!names.insert(link.name).second)
          p.add(l["name"], cat(what, ".name: '", link.name, "' is named twice"));
      }
      read_address(l["listen"], what + ".listen", link.listen, p);
      read_address(l["connect"], what + ".connect", link.connect, p);
      const FaultChange faults = parse_change(l, what, p, {"name", "listen", "connect"});
      if (faults.clear || faults.reset) p.add(l, cat(what, ": clear and reset belong in the schedule"));
      faults.apply(link.faults, 0);
      config.links.push_back(std::move(link));
    }
  }
  if (const YAML::Node schedule = root["schedule"]) {
    if (!schedule.IsSequence()) {
      p.add(schedule, "schedule: expected a list of {at, link, and what changes}");
    } else {
      for (std::size_t i = 0; i < schedule.size(); ++i) {
        const YAML::Node e = schedule[i];
        const auto what = cat("schedule[", i, "]");
        TimedChange change;
        if (!e.IsMap() || !e["at"] || !e["link"]) {
          p.add(e, cat(what, ": expected {at: DURATION, link: NAME or \"*\", and what changes}"));
          continue;
        }
        yaml::read_duration(e["at"], what + ".at", change.at_s, p);
        if (yaml::read_string(e["link"], what + ".link", change.link, p) && change.link != "*" &&
            !names.count(change.link))
          p.add(e["link"], cat(what, ".link: '", change.link, "' is not one of the links"));
        change.change = parse_change(e, what, p, {"at", "link"});
        if (change.change.edits.empty() && !change.change.clear && !change.change.reset)
          p.add(e, cat(what, ": changes nothing"));
        config.schedule.push_back(std::move(change));
      }
    }
  }
  if (!p.empty()) return p.status();
  return config;
}

}  // namespace

Result<ProxyConfig> parse_config(std::string_view text, std::string_view source) {
  auto root = yaml::load_text(text, source);
  if (!root.ok()) return root.status();
  return parse_root(*root, source);
}

Result<ProxyConfig> load_config(const std::string& path) {
  auto root = yaml::load_file(path);
  if (!root.ok()) return root.status();
  return parse_root(*root, path);
}

}  // namespace geoloco::faultproxy
