// geolocod's logs (docs/design.md §7): one line per event on stderr (journald takes
// it from there), as text by default or as one JSON object per line
// (`log_format: json`) with time, level, logger and message, for log
// pipelines.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace geoloco::daemon {

/// Escapes `text` for a JSON string (quotes, backslashes, control characters).
std::string json_escape(std::string_view text);

/// Sets the default logger's format: "text" or "json". Errors: invalid_argument.
Status setup_logging(std::string_view format, std::string_view site);

}  // namespace geoloco::daemon
