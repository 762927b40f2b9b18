// geolocod's TLS over time: a reload (SIGHUP) that applies the site file's
// tls section without a restart, the certificates' expiry dates as metrics,
// and warnings well before any of them runs out.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <spdlog/spdlog.h>

#include "daemon/site_daemon.h"
#include "transport/tls/cert_expiry.h"

namespace geoloco::daemon {

namespace {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Status SiteDaemon::reload(const SiteConfig& loaded) {
  for (const auto& name : settings_needing_restart(site_, loaded))
    spdlog::warn("reload: '{}' changed in the site file; a restart applies it (a reload applies the tls section only)",
                 name);
  if (loaded.name != site_.name) {
    (void)metrics_.add("geoloco_tls_reloads_total", {{"result", "refused"}}, 1);
    return GEOLOCO_ERROR(Err::invalid_argument, "the site file now names site '", loaded.name, "', this daemon is '",
                         site_.name, "': restart it to change sites");
  }
  if (Status s = mesh_->reload_tls(loaded.tls); !s.ok()) {
    (void)metrics_.add("geoloco_tls_reloads_total", {{"result", "refused"}}, 1);
    return GEOLOCO_ERROR(s.code(), "TLS reload refused, this site goes on with its current certificate: ", s.message());
  }
  site_.tls = loaded.tls;
  site_.tls_expiry_warning_s = loaded.tls_expiry_warning_s;
  (void)metrics_.add("geoloco_tls_reloads_total", {{"result", "applied"}}, 1);
  std::string dates;
  if (auto items = transport::tls::read_expiries(site_.tls); items.ok())
    for (const auto& item : *items)
      dates += cat(dates.empty() ? "" : ", ", item.what, " until ", transport::tls::format_utc(item.at));
  spdlog::info("TLS reloaded: {} ({}); new connections use it, live ones are being replaced", site_.tls.cert_file,
               dates);
  check_certificates(false);
  return {};
}

void SiteDaemon::check_certificates(bool peers) {
  auto items = transport::tls::read_expiries(site_.tls);
  if (!items.ok()) {
    spdlog::warn("cannot read the TLS files' dates: {}", items.status().message());
    return;
  }
  if (site_.tls.crl_file.empty()) metrics_.remove("geoloco_tls_crl_next_update_timestamp_seconds", {});
  for (const auto& item : *items) {
    if (item.what == "CRL") (void)metrics_.set("geoloco_tls_crl_next_update_timestamp_seconds", {}, double(item.at));
    else
      (void)metrics_.set("geoloco_tls_certificate_expiry_timestamp_seconds",
                         {{"certificate", item.what == "CA certificate" ? "ca" : "site"}}, double(item.at));
  }
  if (peers) {
    for (const auto& [peer, at] : mesh_->peer_certificate_expiries())
      items->push_back({"certificate of " + peer, "", at});
  }
  for (const auto& line : transport::tls::expiry_warnings(unix_now(), *items, site_.tls_expiry_warning_s))
    spdlog::warn("{}", line);
}

void SiteDaemon::show_peer_certificates() {
  // The certificates of the peers connected now: a peer gone (or revoked) has none shown.
  const auto expiries = mesh_->peer_certificate_expiries();
  for (const auto& p : site_.peers) {
    const Labels labels{{"certificate", "peer"}, {"peer", p.name}};
    if (auto it = expiries.find(p.name); it != expiries.end())
      (void)metrics_.set("geoloco_tls_certificate_expiry_timestamp_seconds", labels, double(it->second));
    else metrics_.remove("geoloco_tls_certificate_expiry_timestamp_seconds", labels);
  }
  const std::uint64_t replaced = mesh_->replaced_connections();
  (void)metrics_.add("geoloco_tls_connections_replaced_total", {}, double(replaced - replaced_seen_));
  replaced_seen_ = replaced;
}

void SiteDaemon::watch_certificates() {
  // Once the peers had a minute to connect, and then twice a day: a warning
  // repeats until the certificate is renewed.
  asio::co_spawn(
      io_,
      [this]() -> asio::awaitable<void> {
        asio::steady_timer timer(io_);
        auto wait = std::chrono::seconds(60);
        while (!stopping_) {
          timer.expires_after(wait);
          auto [ec] = co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
          if (ec || stopping_) break;
          check_certificates(true);
          wait = std::chrono::hours(12);
        }
      },
      asio::detached);
}

}  // namespace geoloco::daemon
