// Which TLS material the daemon warns about, and what it says (a fixed now).
#include <catch2/catch.hpp>

#include "transport/loopback.h"
#include "transport/tls/cert_expiry.h"
#include "transport/tls/tls_context.h"

using namespace geoloco;
using namespace geoloco::transport::tls;

TEST_CASE("expiry warnings name what runs out, when, and what to do; nothing outside the window") {
  const std::int64_t now = 1800000000;  // 2027-01-15 08:00:00 UTC
  const std::int64_t day = 86400;
  const std::vector<TlsExpiry> items{
      {"site certificate", "/tls/site.pem", now + 12 * day},
      {"CA certificate", "/tls/ca.pem", now + 400 * day},
      {"CRL", "/tls/crl.pem", now - 3600},
      {"certificate of us-east", "", now + 5 * 3600},
  };
  const auto lines = expiry_warnings(now, items, 30 * day);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] ==
        "the site certificate (/tls/site.pem) expires in 12 days (2027-01-27 08:00:00 UTC): renew it with 'geoloco "
        "certs issue' and reload the daemon (systemctl reload geolocod, or SIGHUP)");
  CHECK(lines[1] ==
        "the CRL (/tls/crl.pem) was due for its next update on 2027-01-15 07:00:00 UTC: refresh it with 'geoloco "
        "certs crl --ca CA_DIR' and reload the daemon");
  CHECK(lines[2] ==
        "the certificate of us-east expires in 5 hours (2027-01-15 13:00:00 UTC): that site must renew its "
        "certificate and reload its daemon");
  CHECK(expiry_warnings(now, items, 0).size() == 1);  // only the CRL, already past

  // A short-lived item warns in the last quarter of its life, not all of it.
  const std::vector<TlsExpiry> weekly{{"CRL", "/tls/crl.pem", now + 2 * day, now - 5 * day}};
  CHECK(expiry_warnings(now, weekly, 30 * day).empty());
  CHECK(expiry_warnings(now + day, weekly, 30 * day).size() == 1);
}

TEST_CASE("the TLS files' dates are read from the files") {
  auto federation = transport::loopback::Federation::create({"a"});
  REQUIRE(federation.ok());
  auto files = (*federation)->issue("a", "a-short", {10, -300});
  REQUIRE(files.ok());
  auto items = read_expiries(*files);
  REQUIRE(items.ok());
  REQUIRE(items->size() == 2);
  CHECK((*items)[0].what == "site certificate");
  const auto now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(std::abs((*items)[0].at - (now + 10 * 86400 - 300)) < 120);
  CHECK((*items)[1].what == "CA certificate");
  CHECK((*items)[1].at > (*items)[0].at);
  files->crl_file = ((*federation)->dir() / "missing-crl.pem").string();
  CHECK(read_expiries(*files).status().message() == "cannot read " + files->crl_file);
}
