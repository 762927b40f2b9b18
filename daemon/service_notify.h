// Telling systemd how the daemon is doing (Type=notify units, docs/design.md §7):
// READY=1 once the site listens, STATUS= lines a user sees in
// `systemctl status`, WATCHDOG=1 pings within WatchdogSec, RELOADING=1
// while a SIGHUP is applied (`systemctl reload`), STOPPING=1 on shutdown. Outside systemd (no NOTIFY_SOCKET) every call
// does nothing.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/status.h"

namespace geoloco::daemon {

class ServiceNotifier {
 public:
  /// Reads the environment systemd sets (NOTIFY_SOCKET, WATCHDOG_USEC).
  ServiceNotifier();
  bool under_systemd() const { return under_systemd_; }
  /// How often to ping: half of WatchdogSec, or nothing without a watchdog.
  std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_interval_; }

  /// Errors: io (the notify socket refused the message).
  Status ready(const std::string& status);
  Status status(const std::string& status);
  Status watchdog();
  Status stopping(const std::string& status);
  /// RELOADING=1 (a SIGHUP is being applied); ready() again when it is done.
  Status reloading();

 private:
  Status send(const std::string& state);
  bool under_systemd_ = false;
  std::optional<std::chrono::microseconds> watchdog_interval_;
};

}  // namespace geoloco::daemon
