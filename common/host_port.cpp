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

namespace {
bool digit(char c) { return c >= '0' && c <= '9'; }
bool word(char c) { return digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

// Whether text[0, end) ends with a dotted-quad IPv4 address standing alone.
bool ends_with_ipv4(std::string_view text, std::size_t end) {
  std::size_t k = end, dots = 0, digits = 0;
  while (k > 0 && (digit(text[k - 1]) || text[k - 1] == '.')) {
    if (text[k - 1] == '.') {
      if (digits == 0) return false;
      ++dots;
      digits = 0;
    } else if (++digits > 3) {
      return false;
    }
    --k;
  }
  return dots == 3 && digits > 0 && (k == 0 || !word(text[k - 1]));
}
}  // namespace

std::string without_ports(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ':' && i > 0 && i + 1 < text.size() && digit(text[i + 1])) {
      std::size_t j = i + 1;
      while (j < text.size() && digit(text[j])) ++j;
      const bool port_ends = j == text.size() || !word(text[j]);
      if (port_ends && (text[i - 1] == ']' || ends_with_ipv4(text, i))) {
        i = j - 1;  // the port is left out
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

}  // namespace geoloco
