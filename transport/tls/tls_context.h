// The site's TLS configuration: TLS 1.3 only, AES-GCM/ChaCha20 suites, the
// site's certificate and key, and peers verified against the federation CA
// (both directions: mutual authentication). The certificate's name is checked
// against the site a peer claims to be by check_peer_name() after the
// handshake, since only then is the claimed name known.
#pragma once

#include <asio/ssl/context.hpp>
#include <memory>
#include <string>

#include "common/status.h"

typedef struct ssl_st SSL;

namespace geoloco::transport::tls {

struct TlsFiles {
  std::string ca_file;    ///< the federation CA (PEM)
  std::string cert_file;  ///< this site's certificate (PEM)
  std::string key_file;   ///< this site's private key (PEM)
};

/// Loads the files into a context usable for both accepting and dialing.
/// Errors: invalid_argument naming the file that could not be used.
Result<std::shared_ptr<asio::ssl::context>> make_context(const TlsFiles& files);

/// Checks that the peer's verified certificate names `site` (DNS SAN, or CN
/// when there is no SAN). Errors: invalid_argument ("certificate is for
/// 'x', the peer claims 'y'").
Status check_peer_name(SSL* ssl, const std::string& site);

/// Why a handshake failed, in words: OpenSSL's verification result when the
/// certificate was refused ("certificate has expired", "unable to get local
/// issuer certificate"), else the transport's own message.
std::string handshake_failure(SSL* ssl, const std::string& transport_message);

}  // namespace geoloco::transport::tls
