// geolocod: the site daemon (docs/design.md §2). Reads the site file, applies the
// GEOLOCO_* environment and then the flags, and runs until SIGTERM/SIGINT.
// SIGHUP reads them again and applies the tls section (SiteDaemon::reload).
//
// Exit codes: 0 stopped cleanly (jobs stopped, state saved); 2 bad
// configuration or flags; 1 could not start (ports, sockets, TLS files).
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <spdlog/spdlog.h>

#include "daemon/log_setup.h"
#include "daemon/service_notify.h"
#include "daemon/site_config.h"
#include "daemon/site_daemon.h"
#include "transport/io_threads.h"

using namespace geoloco;
using namespace geoloco::daemon;

namespace {

// geoloco-train next to this binary (a build tree, /usr/bin), else on PATH.
std::string default_trainer() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto sibling = self.parent_path() / "geoloco-train";
    if (std::filesystem::exists(sibling)) return sibling.string();
  }
  return "geoloco-train";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "geolocod: the geoloco site daemon (docs/design.md §2). Settings come from the site file, then GEOLOCO_* "
      "environment variables, then these flags (highest precedence)."};
  std::string config_path = "/etc/geoloco/site.yaml";
  app.add_option("--config", config_path, "the site file")->capture_default_str();
  std::map<std::string, std::string> overrides;
  for (const auto& s : overridable_settings()) {
    app.add_option_function<std::string>(
        s.flag, [&overrides, flag = std::string(s.flag)](const std::string& v) { overrides[flag] = v; },
        cat(s.help, " [env ", s.env, "]"));
  }
  std::string trainer = default_trainer();
  app.add_option("--trainer", trainer, "the built-in trainer's program")->capture_default_str();
  std::string group = "geoloco";
  app.add_option("--control-group", group, "group allowed to use the control socket")->capture_default_str();
  bool check_only = false;
  app.add_flag("--check", check_only, "validate the site file (and overrides), print the result, and exit");
  CLI11_PARSE(app, argc, argv);

  // The site file, then the environment, then the flags: at start and at each SIGHUP.
  auto load = [&]() -> Result<SiteConfig> {
    auto site = load_site_file(config_path);
    if (!site.ok()) return site.status();
    GEOLOCO_TRY(apply_environment(*site, [](const char* name) { return std::getenv(name); }));
    for (const auto& [flag, value] : overrides) GEOLOCO_TRY(apply_override(*site, flag, value));
    if (Status v = site->validate(); !v.ok()) return GEOLOCO_ERROR(v.code(), config_path, ": ", v.message());
    return site;
  };
  auto site = load();
  if (!site.ok()) {
    std::fprintf(stderr, "geolocod: %s\n", site.status().message().c_str());
    return 2;
  }
  if (check_only) {
    std::printf("%s: site %s is valid (listen %s:%u, %zu peer(s), data %s)\n", config_path.c_str(), site->name.c_str(),
                site->listen.host.c_str(), site->listen.port, site->peers.size(), site->data_dir.c_str());
    return 0;
  }
  if (Status l = setup_logging(site->log_format, site->name); !l.ok()) {
    std::fprintf(stderr, "geolocod: %s\n", l.message().c_str());
    return 2;
  }

  // Model-sized buffers (Δ, a state transfer) come and go every round: give
  // each its own mapping, returned to the system when freed, instead of
  // letting glibc's adaptive threshold keep them in the heap for good. So
  // the daemon's resident memory is what it holds (docs/design.md §10), not its peak.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  // The connections' threads outlive the event loop and the daemon: handlers
  // left in either may hold connections whose sockets live on these threads.
  transport::IoThreads io_threads(site->transport.io_threads);
  asio::io_context io;
  SiteDaemon daemon(io, io_threads.executor(), *site, DaemonOptions{trainer, group});
  // SIGHUP's handler is in place before the daemon says it is ready: a
  // reload right after the start must not end it (SIGHUP's default action).
  ServiceNotifier notifier;
  asio::signal_set hangup(io, SIGHUP);
  std::function<void()> on_hangup = [&] {
    hangup.async_wait([&](const std::error_code& ec, int) {
      if (ec) return;
      (void)notifier.reloading();
      spdlog::info("SIGHUP: reading {} again", config_path);
      auto loaded = load();
      Status applied = loaded.ok() ? daemon.reload(*loaded) : loaded.status();
      if (!applied.ok()) spdlog::error("reload: {}", applied.message());
      (void)notifier.ready(daemon.summary());
      on_hangup();
    });
  };
  on_hangup();
  if (Status s = daemon.start(); !s.ok()) {
    spdlog::error("cannot start: {}", s.message());
    return 1;
  }
  (void)notifier.ready(daemon.summary());

  int exit_code = 0;
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const std::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("{}: stopping (jobs stop, state is saved)", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    (void)notifier.stopping("stopping");
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          hangup.cancel();
          co_await daemon.shutdown();
          io.stop();
        },
        asio::detached);
  });
  // The watchdog and the status line: proof of life from the event loop itself.
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const auto interval = notifier.watchdog_interval().value_or(std::chrono::seconds(5));
        asio::steady_timer t(io);
        std::string said;
        for (;;) {
          (void)notifier.watchdog();
          if (std::string now = daemon.summary(); now != said) {  // STATUS only when it changes
            (void)notifier.status(now);
            said = std::move(now);
          }
          t.expires_after(interval);
          co_await t.async_wait(asio::use_awaitable);
        }
      },
      asio::detached);
  io.run();
  io_threads.pause();  // nothing runs there while the daemon and its event loop are taken down
  spdlog::info("stopped");
  return exit_code;
}
