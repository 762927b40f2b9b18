#include "daemon/service_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

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
Status ServiceNotifier::reloading() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const long long usec = static_cast<long long>(now.tv_sec) * 1000000 + now.tv_nsec / 1000;
  return send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

}  // namespace geoloco::daemon
