// A network address as configuration files write it: "host:port", or
// "[v6]:port". Shared by the site file and the fault proxy's file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace geoloco {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  bool operator==(const HostPort&) const = default;
};

/// "host:port" or "[v6]:port". Errors: invalid_argument.
Result<HostPort> parse_host_port(std::string_view text);

/// `text` with the port taken off every address in it written "a.b.c.d:port"
/// or "[v6]:port": what a log line says about a connection, less the
/// ephemeral port, so lines about many connections from one host compare
/// equal (a flood is logged once, with its count).
std::string without_ports(std::string_view text);

}  // namespace geoloco
