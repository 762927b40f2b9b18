// The federation's PKI, made with OpenSSL: a CA per federation, and per site
// an EC P-256 key with a certificate whose CN and DNS SAN are the site name.
// `geoloco certs init` and `geoloco certs issue` call these; a user may bring
// certificates from their own PKI instead, in the same PEM files.
//
// Files: CA dir: ca.pem, ca.key, and crl.pem once a certificate is revoked
// (or `geoloco certs crl` made one). Site dir: site.pem, site.key, ca.pem (a
// copy, so a site dir is all a daemon needs). New keys are written mode
// 0600; every file is replaced atomically, and a replaced file keeps its
// mode, owner and group, so a running daemon can reload it.
#pragma once

#include <string>

#include "common/status.h"

namespace geoloco::transport {

struct CertOptions {
  int days_valid = 825;             ///< validity from now, in days
  long not_before_offset_s = -300;  ///< start of validity relative to now (tests use the past)
};

/// Creates a CA named `name` in `dir` (created if missing). Refuses to
/// overwrite an existing ca.key. Errors: invalid_argument, io.
Status create_ca(const std::string& dir, const std::string& name, const CertOptions& options = {});

/// Issues a key and certificate for site `site`, signed by the CA in
/// `ca_dir`, into `out_dir`. The site name must be 1-64 characters of
/// [a-z0-9-.]. Renewal is issuing again into the same `out_dir`: the
/// previous key and certificate stay as site.key.prev and site.pem.prev.
/// Errors: invalid_argument, io.
Status issue_site_cert(const std::string& ca_dir, const std::string& site, const std::string& out_dir,
                       const CertOptions& options = {});

/// Adds the certificate in `cert_file` (issued by the CA in `ca_dir`) to the
/// federation's revocation list, `ca_dir`/crl.pem (made if missing), signed
/// anew and valid for `crl_days`. Returns false when it was listed already.
/// Errors: invalid_argument (not issued by this CA, bad days), io.
Result<bool> revoke_cert(const std::string& ca_dir, const std::string& cert_file, int crl_days);

/// Signs `ca_dir`/crl.pem anew, with the same revoked certificates and a
/// next update `crl_days` from now (an empty list when there was none).
/// Returns how many certificates it lists. Errors: invalid_argument, io.
Result<int> refresh_crl(const std::string& ca_dir, int crl_days);

}  // namespace geoloco::transport
