#include "transport/tls/tls_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "transport/tls/cert_expiry.h"

namespace geoloco::transport::tls {

namespace {

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

struct CrlFree {
  void operator()(X509_CRL* c) const { X509_CRL_free(c); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};

// Adds the CRLs in `path` to the context's store and turns revocation
// checking on for peers' certificates (a site certificate's CRL is its
// CA's). With checking on, a CA without a CRL would make every peer under
// it fail, and a CRL that no CA signed, or that is past its next update,
// every peer at all: each is refused here instead, with the reason.
Status add_crls(SSL_CTX* native, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  GEOLOCO_RETURN_IF(f == nullptr, Err::invalid_argument, "cannot read CRL file ", path);
  std::vector<std::unique_ptr<X509_CRL, CrlFree>> crls;
  while (X509_CRL* next = PEM_read_X509_CRL(f, nullptr, nullptr, nullptr)) crls.emplace_back(next);
  std::fclose(f);
  ERR_clear_error();
  GEOLOCO_RETURN_IF(crls.empty(), Err::invalid_argument, path, " holds no PEM certificate revocation list");
  X509_STORE* store = SSL_CTX_get_cert_store(native);
  STACK_OF(X509_OBJECT)* trusted = X509_STORE_get0_objects(store);
  std::vector<X509*> cas;
  for (int i = 0; i < sk_X509_OBJECT_num(trusted); ++i)
    if (X509* ca = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(trusted, i)); ca != nullptr) cas.push_back(ca);
  std::vector<bool> listed(cas.size(), false);
  for (const auto& crl : crls) {
    bool signed_by_ca = false;
    for (std::size_t i = 0; i < cas.size(); ++i) {
      EVP_PKEY* key = X509_get0_pubkey(cas[i]);
      if (key != nullptr && X509_NAME_cmp(X509_CRL_get_issuer(crl.get()), X509_get_subject_name(cas[i])) == 0 &&
          X509_CRL_verify(crl.get(), key) == 1) {
        signed_by_ca = listed[i] = true;
      }
    }
    ERR_clear_error();
    GEOLOCO_RETURN_IF(!signed_by_ca, Err::invalid_argument, "a CRL in ", path,
                      " is not signed by the federation CA; make it with 'geoloco certs crl --ca CA_DIR'");
    if (const ASN1_TIME* next = X509_CRL_get0_nextUpdate(crl.get()); next != nullptr) {
      GEOLOCO_RETURN_IF(X509_cmp_current_time(next) <= 0, Err::invalid_argument, "the CRL ", path, " expired on ",
                        format_utc(asn1_time_to_unix(next)),
                        " (its next update); every peer would be refused: refresh it with 'geoloco certs crl --ca "
                        "CA_DIR' and reload");
    }
    GEOLOCO_RETURN_IF(X509_STORE_add_crl(store, crl.get()) != 1, Err::invalid_argument, "cannot use CRL ", path, ": ",
                      openssl_error());
  }
  for (std::size_t i = 0; i < cas.size(); ++i) {
    if (listed[i]) continue;
    char cn[256] = "?";
    X509_NAME_get_text_by_NID(X509_get_subject_name(cas[i]), NID_commonName, cn, sizeof cn);
    return GEOLOCO_ERROR(Err::invalid_argument, path, " has no revocation list from the CA '", cn,
                         "', which the CA file trusts: every peer it vouches for would be refused; add that CA's "
                         "CRL to the file (several CRLs may follow each other)");
  }
  X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
  return {};
}

// Verifies `leaf` (with the peer's `chain`, which may be null) against the
// store of `context`, as of now. Returns X509_V_OK or OpenSSL's code.
int verify_against(SSL_CTX* context, X509* leaf, STACK_OF(X509) * chain, const char* purpose) {
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), SSL_CTX_get_cert_store(context), leaf, chain) != 1)
    return X509_V_ERR_UNSPECIFIED;
  X509_STORE_CTX_set_default(ctx.get(), purpose);
  const int ok = X509_verify_cert(ctx.get());
  const int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  return err;
}

// The name in a peer certificate that failed verification, kept on the SSL
// object: OpenSSL drops a refused certificate, and on the accepting side
// nothing else says which site was refused.
void free_name(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<std::string*>(ptr); }

int refused_name_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_name);
  return index;
}

int remember_refused(int preverify_ok, X509_STORE_CTX* store) {
  if (preverify_ok == 1) return 1;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  X509* leaf = X509_STORE_CTX_get0_cert(store);
  if (ssl != nullptr && leaf != nullptr && SSL_get_ex_data(ssl, refused_name_index()) == nullptr) {
    char cn[256] = "?";
    X509_NAME_get_text_by_NID(X509_get_subject_name(leaf), NID_commonName, cn, sizeof cn);
    SSL_set_ex_data(ssl, refused_name_index(), new std::string(cn));
  }
  return 0;
}

}  // namespace

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
  if (!files.crl_file.empty()) GEOLOCO_TRY(add_crls(native, files.crl_file));
  SSL_CTX_set_verify(native, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, remember_refused);
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

Status check_own_certificate(SSL_CTX* context, const std::string& site) {
  X509* own = SSL_CTX_get0_certificate(context);
  GEOLOCO_RETURN_IF(own == nullptr, Err::invalid_argument, "the TLS context has no certificate");
  // With the intermediates the certificate file carries after the site's own.
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(context, &chain);
  const int verified = verify_against(context, own, chain, "ssl_client");
  GEOLOCO_RETURN_IF(verified != X509_V_OK, Err::invalid_argument, "this site's certificate does not verify against ",
                    "the federation CA: ", X509_verify_cert_error_string(verified));
  if (X509_check_host(own, site.data(), site.size(), X509_CHECK_FLAG_NO_WILDCARDS, nullptr) == 1) return {};
  char cn[256] = "?";
  X509_NAME_get_text_by_NID(X509_get_subject_name(own), NID_commonName, cn, sizeof cn);
  return GEOLOCO_ERROR(Err::invalid_argument, "this site's certificate is for '", cn, "', but the site is '", site,
                       "'");
}

Status check_peer_name(SSL* ssl, const std::string& site) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  GEOLOCO_RETURN_IF(cert == nullptr, Err::invalid_argument, "peer presented no certificate");
  GEOLOCO_RETURN_IF(SSL_get_verify_result(ssl) != X509_V_OK, Err::invalid_argument,
                    "peer certificate did not verify: ", X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
  if (X509_check_host(cert, site.data(), site.size(), X509_CHECK_FLAG_NO_WILDCARDS, nullptr) == 1) return {};
  char cn[256] = "?";
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return GEOLOCO_ERROR(Err::invalid_argument, "certificate is for '", cn, "', the peer claims to be '", site, "'");
}

Status verify_peer_again(SSL* ssl, SSL_CTX* context) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  GEOLOCO_RETURN_IF(cert == nullptr, Err::invalid_argument, "peer presented no certificate");
  // The peer's chain as sent (on the client side it starts with the leaf).
  const int verified =
      verify_against(context, cert, SSL_get_peer_cert_chain(ssl), SSL_is_server(ssl) ? "ssl_client" : "ssl_server");
  GEOLOCO_RETURN_IF(verified != X509_V_OK, Err::invalid_argument, kPeerCertificateRefused, ": ",
                    X509_verify_cert_error_string(verified));
  return {};
}

std::int64_t peer_certificate_expiry(SSL* ssl) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  return cert == nullptr ? 0 : asn1_time_to_unix(X509_get0_notAfter(cert));
}

std::string handshake_failure(SSL* ssl, const std::string& transport_message) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify == X509_V_OK) return transport_message;
  // Name whom it was for: on the accepting side nothing else says which site
  // called (a revoked peer is refused and named).
  std::string whose;
  if (const auto* name = static_cast<const std::string*>(SSL_get_ex_data(ssl, refused_name_index())))
    whose = cat(" (the certificate of '", *name, "')");
  return cat(kPeerCertificateRefused, ": ", X509_verify_cert_error_string(verify), whose);
}

}  // namespace geoloco::transport::tls
