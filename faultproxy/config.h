// geoloco-faultproxy's file (docs/faultproxy.md): the links it carries (where
// it listens, where it connects, each link's faults), the schedule of
// changes, the control API's loopback address, and the seed of the jitter.
//
//   control: 127.0.0.1:7700
//   seed: 7
//   links:
//     - {name: a-b, listen: 127.0.0.1:17411, connect: 127.0.0.1:7411,
//        both: {latency: 50ms, jitter: 5ms, rate: 100M}}
//   schedule:
//     - {at: 10s, link: a-b, both: {partition: true}}
//     - {at: 31s, link: a-b, clear: true}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/host_port.h"
#include "common/status.h"
#include "faultproxy/timeline.h"

namespace geoloco::faultproxy {

struct LinkConfig {
  std::string name;
  HostPort listen;
  HostPort connect;
  LinkFaults faults;
};

struct ProxyConfig {
  std::optional<HostPort> control;        ///< the control API (loopback only); none: no API
  std::uint64_t seed = 1;                 ///< of the jitter
  std::uint64_t window_bytes = 8u << 20;  ///< bytes held per direction of a connection before reading stops
  std::vector<LinkConfig> links;
  std::vector<TimedChange> schedule;
};

/// Errors: io (unreadable), invalid_argument with every problem as file:line:column.
Result<ProxyConfig> load_config(const std::string& path);
Result<ProxyConfig> parse_config(std::string_view text, std::string_view source);

/// Whether `host` is a loopback address (127.0.0.0/8, ::1, localhost).
bool is_loopback(const std::string& host);

}  // namespace geoloco::faultproxy
