#include "daemon/service_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>

namespace geoloco::daemon {

ServiceNotifier::ServiceNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  under_systemd_ = socket != nullptr && socket[0] != '\0';
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) watchdog_interval_ = std::chrono::microseconds(usec / 2);
}

Status ServiceNotifier::send(const std::string& state) {
  if (!under_systemd_) return {};
  const int r = sd_notify(0, state.c_str());
  GEOLOCO_RETURN_IF(r < 0, Err::io, "sd_notify(", state.substr(0, state.find('\n')), ") failed: ", std::strerror(-r));
  return {};
}

Status ServiceNotifier::ready(const std::string& status) { return send("READY=1\nSTATUS=" + status); }
Status ServiceNotifier::status(const std::string& status) { return send("STATUS=" + status); }
Status ServiceNotifier::watchdog() { return send("WATCHDOG=1"); }
Status ServiceNotifier::stopping(const std::string& status) { return send("STOPPING=1\nSTATUS=" + status); }

}  // namespace geoloco::daemon
