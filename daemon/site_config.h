// The site file (/etc/geoloco/site.yaml, docs/design.md §6): who this site is, where
// it listens, its peers, its TLS files, where it keeps state and serves
// metrics, its GPUs, and transport tuning. YAML fills the struct; then
// GEOLOCO_* environment variables, then command-line flags override it, in
// that order. Every problem is reported at once with file:line:column.
//
//   name: eu-west
//   listen: 0.0.0.0:7400
//   peers:
//     - {name: us-east, address: us-east.example.org:7400}
//   tls: {ca: /etc/geoloco/tls/ca.pem, cert: /etc/geoloco/tls/site.pem, key: /etc/geoloco/tls/site.key,
//         crl: /etc/geoloco/tls/crl.pem,     # optional: the federation's revocation list
//         expiry_warning: 30d}               # warn this long before a certificate or the CRL runs out
//   data_dir: /var/lib/geoloco
//   metrics: 127.0.0.1:9400
//   control_socket: /run/geoloco/geolocod.sock
//   gpus: [0, 1, 2, 3]
//   log_format: text            # text | json
//   heartbeat: {interval: 2s, timeout: 60s}
//   step_threads: 0             # threads of the passes over the model each round; 0: a core each, up to 8
//   transport: {connections_per_peer: 4, rate_limit: 0, io_threads: 4, read_timeout: 20s,
//               write_timeout: 20s, keepalive_interval: 5s, connect_timeout: 10s,
//               reconnect_max: 10s}     # longest wait between dials to a peer that is down
//
// SIGHUP (systemctl reload) reads the site file again and applies its tls
// section without a restart (docs/design.md); other changes wait for one.
//
// rate_limit caps the site's egress in bit/s with the suffixes of
// common/units.h (1G, 400M; 0: no cap).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/host_port.h"
#include "common/status.h"
#include "transport/mesh.h"
#include "transport/options.h"
#include "transport/tls/tls_context.h"

namespace YAML {
class Node;
}

namespace geoloco::daemon {

using geoloco::HostPort;
using geoloco::parse_host_port;

struct SiteConfig {
  std::string name;                           ///< required; the name in this site's certificate
  HostPort listen{"0.0.0.0", 7400};           ///< where peers connect
  std::vector<transport::PeerAddress> peers;  ///< every other site of the federation
  transport::tls::TlsFiles tls{"/etc/geoloco/tls/ca.pem", "/etc/geoloco/tls/site.pem", "/etc/geoloco/tls/site.key", ""};
  /// Warn this long before the site's certificate, the CA, a peer's
  /// certificate or the CRL's next update runs out.
  std::int64_t tls_expiry_warning_s = 30 * 86400;
  std::string data_dir = "/var/lib/geoloco";                  ///< checkpoints, journals
  HostPort metrics{"127.0.0.1", 9400};                        ///< Prometheus text on http://metrics/metrics
  std::string control_socket = "/run/geoloco/geolocod.sock";  ///< `geoloco submit/status/...` talk here
  std::vector<int> gpus;                                      ///< local GPU ids for the built-in trainer; empty: CPU
  std::string log_format = "text";                            ///< text | json
  transport::TransportOptions transport;                      ///< connections, rate cap, timeouts
  /// Control-plane liveness (docs/design.md §4's hierarchy: read timeout < heartbeat
  /// timeout < round deadline): a site says "still here" every interval; the
  /// coordinator counts it dead after `heartbeat_timeout_ms` of silence.
  int heartbeat_interval_ms = 2000;
  int heartbeat_timeout_ms = 60000;
  /// Threads of the passes over the model that end each round (the COMMIT's
  /// digest, the outer step): decoded and stepped a chunk a thread, off the
  /// daemon's event loop. 0: one per core, at most 8 (pass_threads()).
  int step_threads = 0;
  /// step_threads, with 0 resolved.
  unsigned pass_threads() const;

  /// Errors: invalid_argument naming each broken rule.
  Status validate() const;
};

/// The settings of `loaded` that differ from `running`'s, other than the
/// tls section (which a reload applies), by their site-file names
/// ("listen", "peers", ...): a reload leaves them for a restart.
std::vector<std::string> settings_needing_restart(const SiteConfig& running, const SiteConfig& loaded);

/// Reads a site file's document; absent keys keep their defaults, `name` is
/// required. Errors: invalid_argument listing every problem with line and column.
Result<SiteConfig> parse_site_yaml(const YAML::Node& doc, std::string_view source);
/// Loads and parses a site file. Errors: io, invalid_argument.
Result<SiteConfig> load_site_file(const std::string& path);

/// One overridable setting: its environment variable, its flag, its help.
struct SettingDoc {
  const char* env;
  const char* flag;
  const char* help;
};
/// Every setting the environment and flags may override, for --help.
const std::vector<SettingDoc>& overridable_settings();

/// Applies GEOLOCO_* variables read through `getenv` (so tests pass their
/// own). Errors: invalid_argument naming the variable.
Status apply_environment(SiteConfig& config, const std::function<const char*(const char*)>& getenv);

/// Applies one override by flag name (e.g. "--listen", "0.0.0.0:7500").
/// Errors: invalid_argument naming the flag.
Status apply_override(SiteConfig& config, std::string_view flag, std::string_view value);

}  // namespace geoloco::daemon
