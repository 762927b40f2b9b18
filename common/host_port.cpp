#include "common/host_port.h"

#include <charconv>

namespace geoloco {

Result<HostPort> parse_host_port(std::string_view text) {
  const auto colon = text.rfind(':');
  GEOLOCO_RETURN_IF(colon == std::string_view::npos || colon == 0 || colon + 1 == text.size(), Err::invalid_argument,
                    "'", text, "' is not host:port");
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  GEOLOCO_RETURN_IF(ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535,
                    Err::invalid_argument, "'", text, "': the port must be a number 0..65535");
  return HostPort{std::string(host), static_cast<std::uint16_t>(port)};
}

}  // namespace geoloco
