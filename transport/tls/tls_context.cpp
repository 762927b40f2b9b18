#include "transport/tls/tls_context.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace geoloco::transport::tls {

Result<std::shared_ptr<asio::ssl::context>> make_context(const TlsFiles& files) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(native, TLS1_3_VERSION);
  // AES-128-GCM first: the fastest with AES-NI, and ample for pseudo-gradients.
  SSL_CTX_set_ciphersuites(native, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(native, 0);  // no resumption: nothing is written after the handshake
  std::error_code ec;
  ctx->load_verify_file(files.ca_file, ec);
  GEOLOCO_RETURN_IF(ec, Err::invalid_argument, "cannot use CA file ", files.ca_file, ": ", ec.message());
  ctx->use_certificate_chain_file(files.cert_file, ec);
  GEOLOCO_RETURN_IF(ec, Err::invalid_argument, "cannot use certificate ", files.cert_file, ": ", ec.message());
  ctx->use_private_key_file(files.key_file, asio::ssl::context::pem, ec);
  GEOLOCO_RETURN_IF(ec, Err::invalid_argument, "cannot use key ", files.key_file, ": ", ec.message());
  GEOLOCO_RETURN_IF(SSL_CTX_check_private_key(native) != 1, Err::invalid_argument, files.key_file,
                    " does not belong to ", files.cert_file);
  ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
  GEOLOCO_RETURN_IF(ec, Err::internal, "cannot set TLS verify mode: ", ec.message());
  // Handshakes run on several I/O threads and share these certificates.
  // OpenSSL fills each certificate's cache of decoded extensions on first use;
  // filling it here, on one thread, leaves the handshakes only reading it.
  X509_check_purpose(SSL_CTX_get0_certificate(native), -1, 0);
  STACK_OF(X509_OBJECT)* trusted = X509_STORE_get0_objects(SSL_CTX_get_cert_store(native));
  for (int i = 0; i < sk_X509_OBJECT_num(trusted); ++i)
    if (X509* cert = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(trusted, i)); cert != nullptr)
      X509_check_purpose(cert, -1, 0);
  return ctx;
}

Status check_peer_name(SSL* ssl, const std::string& site) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  GEOLOCO_RETURN_IF(cert == nullptr, Err::invalid_argument, "peer presented no certificate");
  GEOLOCO_RETURN_IF(SSL_get_verify_result(ssl) != X509_V_OK, Err::invalid_argument,
                    "peer certificate did not verify: ",
                    X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
  if (X509_check_host(cert, site.data(), site.size(), X509_CHECK_FLAG_NO_WILDCARDS, nullptr) == 1) return {};
  char cn[256] = "?";
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return GEOLOCO_ERROR(Err::invalid_argument, "certificate is for '", cn, "', the peer claims to be '", site, "'");
}

std::string handshake_failure(SSL* ssl, const std::string& transport_message) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) return cat("peer certificate refused: ", X509_verify_cert_error_string(verify));
  return transport_message;
}

}  // namespace geoloco::transport::tls
