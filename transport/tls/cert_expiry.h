// When the site's TLS material stops being usable: its certificate's and
// the CA's notAfter, and the CRL's next update (past it, OpenSSL refuses
// every peer). The daemon shows these as metrics and warns, well before,
// about whatever is close; the decision is the pure expiry_warnings().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

typedef struct asn1_string_st ASN1_TIME;

namespace geoloco::transport::tls {

struct TlsFiles;

/// One dated item of a site's TLS material.
struct TlsExpiry {
  std::string what;       ///< "site certificate", "CA certificate", "CRL", or "certificate of peer NAME"
  std::string path;       ///< the file it came from (empty for a peer's)
  std::int64_t at = 0;    ///< Unix seconds when it stops being valid
  std::int64_t from = 0;  ///< Unix seconds since when it is valid (0: unknown)
};

/// The dates of `files`' certificate, CA and CRL (when there is one).
/// Errors: invalid_argument naming a file that cannot be read or parsed.
Result<std::vector<TlsExpiry>> read_expiries(const TlsFiles& files);

/// One warning per item that expires within `window_s` of `now`, or within
/// a quarter of its lifetime when that is shorter (a CRL valid for a week
/// warns in its last day and a half, not all week), or has expired: saying
/// what, when, and what to do. Unix seconds throughout.
std::vector<std::string> expiry_warnings(std::int64_t now, const std::vector<TlsExpiry>& items, std::int64_t window_s);

/// An ASN.1 time in Unix seconds.
std::int64_t asn1_time_to_unix(const ASN1_TIME* time);
/// Unix seconds as "2027-01-31 12:00:00 UTC".
std::string format_utc(std::int64_t unix_seconds);

}  // namespace geoloco::transport::tls
