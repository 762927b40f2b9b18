#include "daemon/log_setup.h"

#include <cstdlib>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace geoloco::daemon {

std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

namespace {

// One JSON object per record: {"time":..., "level":..., "site":..., "message":...}.
class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string site) : site_(std::move(site)) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto t = std::chrono::system_clock::to_time_t(msg.time);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char when[96];
    std::snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
    const auto level = spdlog::level::to_string_view(msg.level);
    std::string line = "{\"time\":\"" + std::string(when) + "\",\"level\":\"" +
                       std::string(level.data(), level.size()) + "\",\"site\":\"" + json_escape(site_) +
                       "\",\"message\":\"" + json_escape(std::string_view(msg.payload.data(), msg.payload.size())) +
                       "\"}\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(site_); }

 private:
  std::string site_;
};

}  // namespace

Status setup_logging(std::string_view format, std::string_view site) {
  auto logger = std::make_shared<spdlog::logger>("geolocod", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (format == "json") {
    logger->set_formatter(std::make_unique<JsonFormatter>(std::string(site)));
  } else if (format == "text") {
    logger->set_pattern(std::string("%Y-%m-%d %H:%M:%S.%e %^%l%$ ") + std::string(site) + " %v");
  } else {
    return GEOLOCO_ERROR(Err::invalid_argument, "log format '", format, "': expected text or json");
  }
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  // GEOLOCO_LOG_LEVEL=debug shows what the daemon does not log by default
  // (each refused or ignored message, the mesh's connections): for a drill.
  if (const char* level = std::getenv("GEOLOCO_LOG_LEVEL"); level && *level) {
    const auto l = spdlog::level::from_str(level);
    if (l == spdlog::level::off && std::string_view(level) != "off")
      return GEOLOCO_ERROR(Err::invalid_argument, "GEOLOCO_LOG_LEVEL '", level,
                           "': expected trace, debug, info, warning, error, critical or off");
    spdlog::set_level(l);
  }
  return {};
}

}  // namespace geoloco::daemon
