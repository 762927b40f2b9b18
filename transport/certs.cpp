#include "transport/certs.h"

#include "common/site_name.h"
#include "transport/pem_files.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>

namespace geoloco::transport {

namespace {

using pem::join;
using pem::openssl_error;
using pem::PKeyPtr;
using pem::read_cert;
using pem::read_key;
using pem::X509Ptr;

Result<PKeyPtr> new_ec_key() {
  PKeyPtr key(EVP_EC_gen("P-256"));
  GEOLOCO_RETURN_IF(!key, Err::internal, "EC key generation failed: ", openssl_error());
  return key;
}

Status add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  GEOLOCO_RETURN_IF(ext == nullptr, Err::internal, "certificate extension ", value, ": ", openssl_error());
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  GEOLOCO_RETURN_IF(ok != 1, Err::internal, "certificate extension ", value, ": ", openssl_error());
  return {};
}

// A certificate for `subject_key` named `cn`, signed by issuer_key (self-signed when issuer is null).
Result<X509Ptr> make_cert(EVP_PKEY* subject_key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, bool is_ca,
                          const CertOptions& o) {
  GEOLOCO_RETURN_IF(o.days_valid < 1, Err::invalid_argument, "days_valid must be at least 1, got ", o.days_valid);
  X509Ptr cert(X509_new());
  X509_set_version(cert.get(), 2);  // v3
  unsigned char serial_bytes[16];
  RAND_bytes(serial_bytes, sizeof serial_bytes);
  serial_bytes[0] &= 0x7f;  // positive
  BIGNUM* serial = BN_bin2bn(serial_bytes, sizeof serial_bytes, nullptr);
  BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert.get()));
  BN_free(serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), o.not_before_offset_s);
  X509_time_adj_ex(X509_getm_notAfter(cert.get()), o.days_valid, o.not_before_offset_s, nullptr);
  X509_set_pubkey(cert.get(), subject_key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("geoloco"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  X509* effective_issuer = issuer ? issuer : cert.get();
  if (is_ca) {
    GEOLOCO_TRY(add_extension(cert.get(), effective_issuer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    GEOLOCO_TRY(add_extension(cert.get(), effective_issuer, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    GEOLOCO_TRY(add_extension(cert.get(), effective_issuer, NID_basic_constraints, "critical,CA:FALSE"));
    GEOLOCO_TRY(add_extension(cert.get(), effective_issuer, NID_key_usage, "critical,digitalSignature"));
    GEOLOCO_TRY(add_extension(cert.get(), effective_issuer, NID_ext_key_usage, "serverAuth,clientAuth"));
    GEOLOCO_TRY(add_extension(cert.get(), effective_issuer, NID_subject_alt_name, ("DNS:" + cn).c_str()));
  }
  GEOLOCO_TRY(add_extension(cert.get(), effective_issuer, NID_subject_key_identifier, "hash"));
  if (issuer) GEOLOCO_TRY(add_extension(cert.get(), effective_issuer, NID_authority_key_identifier, "keyid:always"));
  GEOLOCO_RETURN_IF(X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0, Err::internal,
                    "signing failed: ", openssl_error());
  return cert;
}

// Whether the PEM bundle at `path` (if any) holds `cert`.
bool bundle_holds(const std::string& path, X509* cert) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  bool found = false;
  while (!found) {
    X509Ptr next(PEM_read_X509(f, nullptr, nullptr, nullptr));
    if (!next) break;
    found = X509_cmp(next.get(), cert) == 0;
  }
  std::fclose(f);
  ERR_clear_error();
  return found;
}

Status make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot create directory ", dir, ": ", ec.message());
  return {};
}

}  // namespace

Status create_ca(const std::string& dir, const std::string& name, const CertOptions& options) {
  GEOLOCO_RETURN_IF(name.empty(), Err::invalid_argument, "the CA needs a name");
  GEOLOCO_RETURN_IF(std::filesystem::exists(join(dir, "ca.key")), Err::invalid_argument, join(dir, "ca.key"),
                    " exists; refusing to replace a federation's CA (remove it first if you mean to)");
  GEOLOCO_TRY(make_dir(dir));
  auto key = new_ec_key();
  if (!key.ok()) return key.status();
  auto cert = make_cert(key->get(), name, nullptr, key->get(), true, options);
  if (!cert.ok()) return cert.status();
  GEOLOCO_TRY(pem::write_pem(join(dir, "ca.key"), pem::Kind::key, key->get(), nullptr, nullptr));
  return pem::write_pem(join(dir, "ca.pem"), pem::Kind::cert, nullptr, cert->get(), nullptr);
}

Status issue_site_cert(const std::string& ca_dir, const std::string& site, const std::string& out_dir,
                       const CertOptions& options) {
  const std::string problem = site_name_problem(site);
  GEOLOCO_RETURN_IF(!problem.empty(), Err::invalid_argument, problem);
  auto ca_key = read_key(join(ca_dir, "ca.key"), " (is it a CA directory made by 'geoloco certs init'?)");
  if (!ca_key.ok()) return ca_key.status();
  auto ca_cert = read_cert(join(ca_dir, "ca.pem"));
  if (!ca_cert.ok()) return ca_cert.status();
  GEOLOCO_RETURN_IF(X509_check_private_key(ca_cert->get(), ca_key->get()) != 1, Err::invalid_argument, ca_dir,
                    ": ca.key does not belong to ca.pem");
  GEOLOCO_TRY(make_dir(out_dir));
  auto key = new_ec_key();
  if (!key.ok()) return key.status();
  auto cert = make_cert(key->get(), site, ca_cert->get(), ca_key->get(), false, options);
  if (!cert.ok()) return cert.status();
  // A renewal keeps the previous pair as .prev. The key is replaced before
  // the certificate: a reload between the two sees a pair that does not
  // match, refuses it, and keeps what it had.
  for (const char* f : {"site.key", "site.pem"}) GEOLOCO_TRY(pem::keep_previous(join(out_dir, f)));
  GEOLOCO_TRY(pem::write_pem(join(out_dir, "site.key"), pem::Kind::key, key->get(), nullptr, nullptr));
  GEOLOCO_TRY(pem::write_pem(join(out_dir, "site.pem"), pem::Kind::cert, nullptr, cert->get(), nullptr));
  // A ca.pem that holds this CA already stays as it is: it may be a bundle
  // of several CAs (during a CA's rotation) that the site trusts.
  if (bundle_holds(join(out_dir, "ca.pem"), ca_cert->get())) return {};
  return pem::write_pem(join(out_dir, "ca.pem"), pem::Kind::cert, nullptr, ca_cert->get(), nullptr);
}

}  // namespace geoloco::transport
