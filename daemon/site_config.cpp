#include "daemon/site_config.h"

#include "common/units.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "common/yaml_reader.h"
#include "common/site_name.h"
#include "diloco/chunk_pass.h"

namespace geoloco::daemon {

Status SiteConfig::validate() const {
  std::string problems;
  auto rule = [&](bool broken, const std::string& what) {
    if (broken) problems += (problems.empty() ? "" : "\n") + what;
  };
  rule(name.empty(), "name: every site needs a name (the one in its certificate)");
  if (!name.empty()) {
    const std::string p = site_name_problem(name);
    rule(!p.empty(), "name: " + p);
  }
  std::set<std::string> seen;
  for (const auto& peer : peers) {
    rule(peer.name == name, cat("peers: '", peer.name, "' is this site itself"));
    rule(!seen.insert(peer.name).second, cat("peers: '", peer.name, "' is listed twice"));
    rule(peer.port == 0, cat("peers: '", peer.name, "' needs a port"));
  }
  rule(data_dir.empty(), "data_dir: must not be empty");
  rule(log_format != "text" && log_format != "json", cat("log_format: expected text or json, got '", log_format, "'"));
  rule(control_socket.empty(), "control_socket: must not be empty");
  for (int g : gpus) rule(g < 0, cat("gpus: GPU ids are >= 0, got ", g));
  if (Status t = transport.validate(); !t.ok()) rule(true, "transport: " + t.message());
  rule(heartbeat_interval_ms < 1 || heartbeat_timeout_ms < 2 * heartbeat_interval_ms,
       cat("heartbeat: timeout (", heartbeat_timeout_ms, " ms) must be at least twice the interval (",
           heartbeat_interval_ms, " ms)"));
  rule(heartbeat_timeout_ms <= transport.read_timeout_ms,
       cat("heartbeat.timeout (", heartbeat_timeout_ms, " ms) must exceed transport.read_timeout (",
           transport.read_timeout_ms, " ms): a dead connection must be noticed before a dead site"));
  rule(step_threads < 0 || step_threads > 256,
       cat("step_threads: expected 0 (a thread per core, up to 8) to 256, got ", step_threads));
  rule(transport.insecure_plaintext_for_tests, "plaintext transport exists for tests only; geolocod always uses TLS");
  if (!problems.empty()) return Status(Err::invalid_argument, problems);
  return {};
}

unsigned SiteConfig::pass_threads() const {
  return step_threads > 0 ? static_cast<unsigned>(step_threads) : diloco::default_pass_threads();
}

std::vector<std::string> settings_needing_restart(const SiteConfig& running, const SiteConfig& loaded) {
  std::vector<std::string> out;
  auto differs = [&out](bool changed, const char* name) {
    if (changed) out.push_back(name);
  };
  differs(running.name != loaded.name, "name");
  differs(running.listen != loaded.listen, "listen");
  differs(running.peers != loaded.peers, "peers");
  differs(running.data_dir != loaded.data_dir, "data_dir");
  differs(running.metrics != loaded.metrics, "metrics");
  differs(running.control_socket != loaded.control_socket, "control_socket");
  differs(running.gpus != loaded.gpus, "gpus");
  differs(running.log_format != loaded.log_format, "log_format");
  differs(running.transport != loaded.transport, "transport");
  differs(running.heartbeat_interval_ms != loaded.heartbeat_interval_ms ||
              running.heartbeat_timeout_ms != loaded.heartbeat_timeout_ms,
          "heartbeat");
  differs(running.step_threads != loaded.step_threads, "step_threads");
  return out;
}

Result<SiteConfig> parse_site_yaml(const YAML::Node& doc, std::string_view source) {
  yaml::Problems p(source);
  SiteConfig c;
  if (!doc.IsMap()) {
    p.add(doc, "a site file is a map (name, listen, peers, tls, ...)");
    return p.status();
  }
  auto host_port = [&](const YAML::Node& v, const std::string& what, HostPort& out) {
    std::string text;
    if (!yaml::read_string(v, what, text, p)) return;
    auto hp = parse_host_port(text);
    if (hp.ok()) out = *hp;
    else p.add(v, cat(what, ": ", hp.status().message()));
  };
  auto millis = [&](const YAML::Node& v, const std::string& what, int& out) {
    double seconds = 0;
    if (!yaml::read_duration(v, what, seconds, p)) return;
    if (seconds > 86400) p.add(v, cat(what, ": at most a day (24h), got ", v.as<std::string>()));
    else out = static_cast<int>(seconds * 1000 + 0.5);
  };
  auto mbit = [&](const YAML::Node& v, const std::string& what, double& out) {  // bit/s with suffixes, 0: none
    std::string text;
    if (!yaml::read_string(v, what, text, p)) return;
    auto rate = parse_rate_cap(text);
    if (rate.ok()) out = *rate / 1e6;
    else p.add(v, cat(what, ": ", rate.status().message()));
  };
  for (const auto& kv : doc) {
    const std::string key = kv.first.IsScalar() ? kv.first.as<std::string>() : "";
    const YAML::Node& v = kv.second;
    if (key == "name") yaml::read_string(v, "name", c.name, p);
    else if (key == "listen") host_port(v, "listen", c.listen);
    else if (key == "metrics") host_port(v, "metrics", c.metrics);
    else if (key == "data_dir") yaml::read_string(v, "data_dir", c.data_dir, p);
    else if (key == "control_socket") yaml::read_string(v, "control_socket", c.control_socket, p);
    else if (key == "log_format") yaml::read_string(v, "log_format", c.log_format, p);
    else if (key == "step_threads") yaml::read_number(v, "step_threads", c.step_threads, p);
    else if (key == "gpus") {
      if (!v.IsSequence()) p.add(v, "gpus: expected a list of GPU ids, e.g. [0, 1]");
      else
        for (const auto& g : v) {
          int id = 0;
          if (yaml::read_number(g, "gpus", id, p)) c.gpus.push_back(id);
        }
    } else if (key == "peers") {
      if (!v.IsSequence()) {
        p.add(v, "peers: expected a list of {name: ..., address: host:port}");
        continue;
      }
      for (const auto& peer : v) {
        if (!peer.IsMap() || !peer["name"] || !peer["address"]) {
          p.add(peer, "peers: each peer is {name: ..., address: host:port}");
          continue;
        }
        transport::PeerAddress a;
        yaml::read_string(peer["name"], "peers.name", a.name, p);
        HostPort hp;
        host_port(peer["address"], cat("peers.", a.name, ".address"), hp);
        a.host = hp.host;
        a.port = hp.port;
        c.peers.push_back(a);
      }
    } else if (key == "tls") {
      if (!v.IsMap()) {
        p.add(v, "tls: expected {ca: ..., cert: ..., key: ..., crl: ..., expiry_warning: 30d}");
        continue;
      }
      for (const auto& t : v) {
        const std::string k = t.first.IsScalar() ? t.first.as<std::string>() : "";
        if (k == "ca") yaml::read_string(t.second, "tls.ca", c.tls.ca_file, p);
        else if (k == "cert") yaml::read_string(t.second, "tls.cert", c.tls.cert_file, p);
        else if (k == "key") yaml::read_string(t.second, "tls.key", c.tls.key_file, p);
        else if (k == "crl") yaml::read_string(t.second, "tls.crl", c.tls.crl_file, p);
        else if (k == "expiry_warning") {
          double seconds = 0;
          if (yaml::read_duration(t.second, "tls.expiry_warning", seconds, p))
            c.tls_expiry_warning_s = static_cast<std::int64_t>(seconds);
        } else {
          p.add(t.first, cat("tls: unknown key '", k, "' (allowed: ca, cert, key, crl, expiry_warning)"));
        }
      }
    } else if (key == "heartbeat") {
      if (!v.IsMap()) {
        p.add(v, "heartbeat: expected {interval: 2s, timeout: 60s}");
        continue;
      }
      for (const auto& t : v) {
        const std::string k = t.first.IsScalar() ? t.first.as<std::string>() : "";
        if (k == "interval") millis(t.second, "heartbeat.interval", c.heartbeat_interval_ms);
        else if (k == "timeout") millis(t.second, "heartbeat.timeout", c.heartbeat_timeout_ms);
        else p.add(t.first, cat("heartbeat: unknown key '", k, "' (allowed: interval, timeout)"));
      }
    } else if (key == "transport") {
      if (!v.IsMap()) {
        p.add(v, "transport: expected a map of options");
        continue;
      }
      for (const auto& t : v) {
        const std::string k = t.first.IsScalar() ? t.first.as<std::string>() : "";
        const std::string what = "transport." + k;
        auto& o = c.transport;
        if (k == "connections_per_peer") yaml::read_number(t.second, what, o.connections_per_peer, p);
        else if (k == "rate_limit") mbit(t.second, what, o.rate_limit_mbit);
        else if (k == "rate_limit_mbit")
          p.add(t.first,
                "transport.rate_limit_mbit is now transport.rate_limit, in bit/s with a suffix "
                "(rate_limit_mbit: 900 is rate_limit: 900M)");
        else if (k == "io_threads") yaml::read_number(t.second, what, o.io_threads, p);
        else if (k == "read_timeout") millis(t.second, what, o.read_timeout_ms);
        else if (k == "write_timeout") millis(t.second, what, o.write_timeout_ms);
        else if (k == "keepalive_interval") millis(t.second, what, o.keepalive_interval_ms);
        else if (k == "connect_timeout") millis(t.second, what, o.connect_timeout_ms);
        else if (k == "reconnect_max") millis(t.second, what, o.reconnect_max_ms);
        else
          p.add(t.first, cat("transport: unknown key '", k,
                             "' (allowed: connections_per_peer, rate_limit, io_threads, read_timeout, "
                             "write_timeout, keepalive_interval, connect_timeout, reconnect_max)"));
      }
    } else {
      p.add(kv.first, cat("unknown key '", key,
                          "' (allowed: name, listen, peers, tls, data_dir, metrics, control_socket, gpus, "
                          "log_format, heartbeat, step_threads, transport)"));
    }
  }
  if (!doc["name"]) p.add(doc, "name: missing; every site needs a name (the one in its certificate)");
  if (p.empty()) {
    Status valid = c.validate();
    if (!valid.ok()) p.add(doc, valid.message());
  }
  if (!p.empty()) return p.status();
  return c;
}

Result<SiteConfig> load_site_file(const std::string& path) {
  auto doc = yaml::load_file(path);
  if (!doc.ok()) return doc.status();
  return parse_site_yaml(*doc, path);
}

const std::vector<SettingDoc>& overridable_settings() {
  static const std::vector<SettingDoc> docs{
      {"GEOLOCO_NAME", "--name", "this site's name (the one in its certificate)"},
      {"GEOLOCO_LISTEN", "--listen", "host:port peers connect to (default 0.0.0.0:7400)"},
      {"GEOLOCO_DATA_DIR", "--data-dir", "checkpoints and journals (default /var/lib/geoloco)"},
      {"GEOLOCO_METRICS", "--metrics", "host:port of the Prometheus endpoint (default 127.0.0.1:9400)"},
      {"GEOLOCO_CONTROL_SOCKET", "--control-socket", "Unix socket of the CLI (default /run/geoloco/geolocod.sock)"},
      {"GEOLOCO_LOG_FORMAT", "--log-format", "text or json (default text)"},
      {"GEOLOCO_RATE_LIMIT", "--rate-limit", "cap on this site's egress in bit/s, e.g. 1G (default 0: none)"},
  };
  return docs;
}

Status apply_override(SiteConfig& c, std::string_view flag, std::string_view value) {
  const std::string v(value);
  if (flag == "--name") c.name = v;
  else if (flag == "--data-dir") c.data_dir = v;
  else if (flag == "--control-socket") c.control_socket = v;
  else if (flag == "--log-format") c.log_format = v;
  else if (flag == "--listen" || flag == "--metrics") {
    auto hp = parse_host_port(v);
    GEOLOCO_RETURN_IF(!hp.ok(), Err::invalid_argument, flag, ": ", hp.status().message());
    (flag == "--listen" ? c.listen : c.metrics) = *hp;
  } else if (flag == "--rate-limit") {
    auto rate = parse_rate_cap(v);
    GEOLOCO_RETURN_IF(!rate.ok(), Err::invalid_argument, flag, ": ", rate.status().message());
    c.transport.rate_limit_mbit = *rate / 1e6;
  } else {
    return GEOLOCO_ERROR(Err::invalid_argument, "unknown setting ", flag);
  }
  return {};
}

Status apply_environment(SiteConfig& c, const std::function<const char*(const char*)>& getenv) {
  // A cap set under its old name would silently be no cap at all.
  GEOLOCO_RETURN_IF(getenv("GEOLOCO_RATE_LIMIT_MBIT") != nullptr, Err::invalid_argument,
                    "GEOLOCO_RATE_LIMIT_MBIT is now GEOLOCO_RATE_LIMIT, in bit/s with a suffix (900 Mbit/s is 900M)");
  for (const auto& s : overridable_settings()) {
    const char* value = getenv(s.env);
    if (value == nullptr) continue;
    Status applied = apply_override(c, s.flag, value);
    GEOLOCO_RETURN_IF(!applied.ok(), Err::invalid_argument, s.env, " (", s.flag, "): ", applied.message());
  }
  return {};
}

}  // namespace geoloco::daemon
