// The notifier speaks systemd's notify protocol: a datagram per call to the
// socket named by NOTIFY_SOCKET; without it, nothing happens.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "daemon/service_notify.h"

using namespace geoloco;
using namespace geoloco::daemon;

namespace {
std::string receive(int fd) {
  char buf[512];
  const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}
}  // namespace

TEST_CASE("ready, status, watchdog and stopping reach systemd's socket") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("geoloco-notify-" + std::to_string(::getpid()))).string();
  ::unlink(path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);

  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  ::setenv("WATCHDOG_USEC", "20000000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  ServiceNotifier n;
  CHECK(n.under_systemd());
  REQUIRE(n.watchdog_interval());
  CHECK(*n.watchdog_interval() == std::chrono::seconds(10));
  REQUIRE(n.ready("listening on 0.0.0.0:7400").ok());
  CHECK(receive(fd) == "READY=1\nSTATUS=listening on 0.0.0.0:7400");
  REQUIRE(n.status("job demo: round 3").ok());
  CHECK(receive(fd) == "STATUS=job demo: round 3");
  REQUIRE(n.watchdog().ok());
  CHECK(receive(fd) == "WATCHDOG=1");
  REQUIRE(n.stopping("stopping: SIGTERM").ok());
  CHECK(receive(fd) == "STOPPING=1\nSTATUS=stopping: SIGTERM");

  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  ServiceNotifier outside;
  CHECK_FALSE(outside.under_systemd());
  CHECK_FALSE(outside.watchdog_interval());
  CHECK(outside.ready("x").ok());
  CHECK(receive(fd).empty());
  ::close(fd);
  ::unlink(path.c_str());
}
