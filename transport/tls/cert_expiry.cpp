#include "transport/tls/cert_expiry.h"

#include <openssl/asn1.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <ctime>
#include <memory>

#include "transport/tls/tls_context.h"

namespace geoloco::transport::tls {

namespace {

struct X509Free {
  void operator()(X509* c) const { X509_free(c); }
};
struct CrlFree {
  void operator()(X509_CRL* c) const { X509_CRL_free(c); }
};

Result<std::pair<std::int64_t, std::int64_t>> certificate_dates(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  GEOLOCO_RETURN_IF(f == nullptr, Err::invalid_argument, "cannot read ", path);
  std::unique_ptr<X509, X509Free> cert(PEM_read_X509(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  ERR_clear_error();
  GEOLOCO_RETURN_IF(!cert, Err::invalid_argument, path, " is not a PEM certificate");
  return std::pair{asn1_time_to_unix(X509_get0_notBefore(cert.get())),
                   asn1_time_to_unix(X509_get0_notAfter(cert.get()))};
}

Result<std::pair<std::int64_t, std::int64_t>> crl_dates(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  GEOLOCO_RETURN_IF(f == nullptr, Err::invalid_argument, "cannot read ", path);
  std::unique_ptr<X509_CRL, CrlFree> crl(PEM_read_X509_CRL(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  ERR_clear_error();
  GEOLOCO_RETURN_IF(!crl, Err::invalid_argument, path, " is not a PEM certificate revocation list");
  const ASN1_TIME* next = X509_CRL_get0_nextUpdate(crl.get());
  GEOLOCO_RETURN_IF(next == nullptr, Err::invalid_argument, path, " has no next update");
  return std::pair{asn1_time_to_unix(X509_CRL_get0_lastUpdate(crl.get())), asn1_time_to_unix(next)};
}

std::string in_words(std::int64_t seconds) {
  if (seconds >= 2 * 86400) return cat(seconds / 86400, " days");
  if (seconds >= 2 * 3600) return cat(seconds / 3600, " hours");
  return cat(seconds / 60, " minutes");
}

}  // namespace

std::int64_t asn1_time_to_unix(const ASN1_TIME* time) {
  std::tm tm{};
  if (time == nullptr || ASN1_TIME_to_tm(time, &tm) != 1) return 0;
  return static_cast<std::int64_t>(timegm(&tm));
}

std::string format_utc(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

Result<std::vector<TlsExpiry>> read_expiries(const TlsFiles& files) {
  std::vector<TlsExpiry> out;
  auto site = certificate_dates(files.cert_file);
  if (!site.ok()) return site.status();
  out.push_back({"site certificate", files.cert_file, site->second, site->first});
  auto ca = certificate_dates(files.ca_file);
  if (!ca.ok()) return ca.status();
  out.push_back({"CA certificate", files.ca_file, ca->second, ca->first});
  if (!files.crl_file.empty()) {
    auto crl = crl_dates(files.crl_file);
    if (!crl.ok()) return crl.status();
    out.push_back({"CRL", files.crl_file, crl->second, crl->first});
  }
  return out;
}

std::vector<std::string> expiry_warnings(std::int64_t now, const std::vector<TlsExpiry>& items, std::int64_t window_s) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    const std::int64_t left = item.at - now;
    const std::int64_t window =
        item.from > 0 && item.at > item.from ? std::min(window_s, (item.at - item.from) / 4) : window_s;
    if (left > window) continue;
    const std::string where = item.path.empty() ? "" : cat(" (", item.path, ")");
    const bool crl = item.what == "CRL";
    const std::string fix = crl ? "refresh it with 'geoloco certs crl --ca CA_DIR' and reload the daemon"
                            : item.what == "CA certificate"
                                ? "make a new CA and reissue every site's certificate before then"
                            : item.path.empty() ? "that site must renew its certificate and reload its daemon"
                                                : "renew it with 'geoloco certs issue' and reload the daemon "
                                                  "(systemctl reload geolocod, or SIGHUP)";
    if (left <= 0) {
      out.push_back(cat("the ", item.what, where, crl ? " was due for its next update on " : " expired on ",
                        format_utc(item.at), ": ", fix));
    } else {
      out.push_back(cat("the ", item.what, where, crl ? " is due for its next update in " : " expires in ",
                        in_words(left), " (", format_utc(item.at), "): ", fix));
    }
  }
  return out;
}

}  // namespace geoloco::transport::tls
