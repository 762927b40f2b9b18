// The site's TLS configuration: TLS 1.3 only, AES-GCM/ChaCha20 suites, the
// site's certificate and key, and peers verified against the federation CA
// (both directions: mutual authentication), and against the federation's
// certificate revocation list when the site has one. The certificate's name
// is checked against the site a peer claims to be by check_peer_name()
// after the handshake, since only then is the claimed name known.
//
// A context is immutable once made: a reload (new certificate, new CRL)
// makes a new one, and connections keep the context they were made with.
#pragma once

#include <asio/ssl/context.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace geoloco::transport::tls {

struct TlsFiles {
  std::string ca_file;    ///< the federation CA (PEM)
  std::string cert_file;  ///< this site's certificate (PEM)
  std::string key_file;   ///< this site's private key (PEM)
  /// The federation's certificate revocation list (PEM, signed by the CA);
  /// empty: no CRL. With one, a peer whose certificate it lists is refused.
  std::string crl_file;
  bool operator==(const TlsFiles&) const = default;
};

/// Loads the files into a context usable for both accepting and dialing.
/// Errors: invalid_argument naming the file that could not be used: a CA,
/// certificate or key that does not parse, a key that is not the
/// certificate's, a CRL not signed by the CA or past its next update.
Result<std::shared_ptr<asio::ssl::context>> make_context(const TlsFiles& files);

/// Checks that the context's own certificate is valid now for `site`:
/// issued by the context's CA, not revoked by its CRL, not expired, and
/// naming `site`. Errors: invalid_argument saying which.
Status check_own_certificate(SSL_CTX* context, const std::string& site);

/// Checks that the peer's verified certificate names `site` (DNS SAN, or CN
/// when there is no SAN). Errors: invalid_argument ("certificate is for
/// 'x', the peer claims 'y'").
Status check_peer_name(SSL* ssl, const std::string& site);

/// Verifies the certificate a live connection's peer presented at its
/// handshake again, against `context`'s CA and CRL as of now (a CRL loaded
/// since may list it). Errors: invalid_argument ("certificate revoked").
Status verify_peer_again(SSL* ssl, SSL_CTX* context);

/// The peer certificate's notAfter in Unix seconds; 0 when there is none.
std::int64_t peer_certificate_expiry(SSL* ssl);

/// How handshake_failure() begins when this side refused the peer's certificate.
inline constexpr std::string_view kPeerCertificateRefused = "peer certificate refused";

/// Why a handshake failed, in words: OpenSSL's verification result when the
/// certificate was refused ("certificate has expired", "unable to get local
/// issuer certificate"), else the transport's own message.
std::string handshake_failure(SSL* ssl, const std::string& transport_message);

}  // namespace geoloco::transport::tls
