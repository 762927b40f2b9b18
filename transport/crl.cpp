// The federation's certificate revocation list (certs.h): ca_dir/crl.pem,
// signed by the CA, listing the serial numbers of revoked site
// certificates. Each change writes the whole list again with a higher CRL
// number and a new next update; sites load it through the site file's
// `tls.crl` and a reload.
#include <openssl/x509v3.h>

#include <ctime>
#include <filesystem>
#include <vector>

#include "transport/certs.h"
#include "transport/pem_files.h"

namespace geoloco::transport {

namespace {

using pem::join;
using pem::openssl_error;

struct Revoked {
  pem::X509Ptr ca;
  pem::PKeyPtr key;
  std::vector<X509_REVOKED*> entries;  // owned; handed to the new CRL
  long number = 0;                     // the current CRL's number
  ~Revoked() {
    for (auto* r : entries) X509_REVOKED_free(r);
  }
};

// The CA and the entries of its current CRL (none when there is none yet).
Result<std::unique_ptr<Revoked>> load(const std::string& ca_dir) {
  auto out = std::make_unique<Revoked>();
  auto key = pem::read_key(join(ca_dir, "ca.key"), " (is it a CA directory made by 'geoloco certs init'?)");
  if (!key.ok()) return key.status();
  auto ca = pem::read_cert(join(ca_dir, "ca.pem"));
  if (!ca.ok()) return ca.status();
  GEOLOCO_RETURN_IF(X509_check_private_key(ca->get(), key->get()) != 1, Err::invalid_argument, ca_dir,
                    ": ca.key does not belong to ca.pem");
  out->ca = std::move(*ca);
  out->key = std::move(*key);
  const std::string path = join(ca_dir, "crl.pem");
  if (!std::filesystem::exists(path)) return out;
  auto crl = pem::read_crl(path);
  if (!crl.ok()) return crl.status();
  GEOLOCO_RETURN_IF(X509_CRL_verify(crl->get(), X509_get0_pubkey(out->ca.get())) != 1, Err::invalid_argument, path,
                    " is not signed by this CA's key; move it away to start a new list");
  STACK_OF(X509_REVOKED)* list = X509_CRL_get_REVOKED(crl->get());
  for (int i = 0; i < sk_X509_REVOKED_num(list); ++i)
    out->entries.push_back(X509_REVOKED_dup(sk_X509_REVOKED_value(list, i)));
  if (auto* n = static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(crl->get(), NID_crl_number, nullptr, nullptr))) {
    out->number = ASN1_INTEGER_get(n);
    ASN1_INTEGER_free(n);
  }
  return out;
}

// Signs and writes the list as ca_dir/crl.pem.
Status write(const std::string& ca_dir, Revoked& r, int days) {
  GEOLOCO_RETURN_IF(days < 1, Err::invalid_argument, "a CRL is valid for at least 1 day, got ", days);
  pem::CrlPtr crl(X509_CRL_new());
  X509_CRL_set_version(crl.get(), X509_CRL_VERSION_2);
  X509_CRL_set_issuer_name(crl.get(), X509_get_subject_name(r.ca.get()));
  std::unique_ptr<ASN1_TIME, pem::Deleter<ASN1_TIME, ASN1_TIME_free>> last(X509_gmtime_adj(nullptr, 0));
  std::unique_ptr<ASN1_TIME, pem::Deleter<ASN1_TIME, ASN1_TIME_free>> next(X509_time_adj_ex(nullptr, days, 0, nullptr));
  X509_CRL_set1_lastUpdate(crl.get(), last.get());
  X509_CRL_set1_nextUpdate(crl.get(), next.get());
  for (auto*& entry : r.entries) {
    X509_CRL_add0_revoked(crl.get(), entry);
    entry = nullptr;
  }
  r.entries.clear();
  std::unique_ptr<ASN1_INTEGER, pem::Deleter<ASN1_INTEGER, ASN1_INTEGER_free>> number(ASN1_INTEGER_new());
  ASN1_INTEGER_set(number.get(), r.number + 1);
  X509_CRL_add1_ext_i2d(crl.get(), NID_crl_number, number.get(), 0, 0);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, r.ca.get(), nullptr, nullptr, crl.get(), 0);
  if (X509_EXTENSION* akid = X509V3_EXT_conf_nid(nullptr, &ctx, NID_authority_key_identifier, "keyid:always")) {
    X509_CRL_add_ext(crl.get(), akid, -1);
    X509_EXTENSION_free(akid);
  }
  X509_CRL_sort(crl.get());
  GEOLOCO_RETURN_IF(X509_CRL_sign(crl.get(), r.key.get(), EVP_sha256()) == 0, Err::internal,
                    "signing the CRL failed: ", openssl_error());
  return pem::write_pem(join(ca_dir, "crl.pem"), pem::Kind::crl, nullptr, nullptr, crl.get());
}

}  // namespace

Result<bool> revoke_cert(const std::string& ca_dir, const std::string& cert_file, int crl_days) {
  auto lock = pem::DirLock::take(ca_dir);
  if (!lock.ok()) return lock.status();
  auto r = load(ca_dir);
  if (!r.ok()) return r.status();
  auto cert = pem::read_cert(cert_file);
  if (!cert.ok()) return cert.status();
  GEOLOCO_RETURN_IF(X509_verify(cert->get(), X509_get0_pubkey((*r)->ca.get())) != 1, Err::invalid_argument, cert_file,
                    " was not issued by the CA in ", ca_dir, ": its CRL cannot revoke it");
  const ASN1_INTEGER* serial = X509_get0_serialNumber(cert->get());
  for (auto* entry : (*r)->entries)
    if (ASN1_INTEGER_cmp(X509_REVOKED_get0_serialNumber(entry), serial) == 0) return false;
  X509_REVOKED* entry = X509_REVOKED_new();
  std::unique_ptr<ASN1_TIME, pem::Deleter<ASN1_TIME, ASN1_TIME_free>> now(X509_gmtime_adj(nullptr, 0));
  X509_REVOKED_set_serialNumber(entry, const_cast<ASN1_INTEGER*>(serial));
  X509_REVOKED_set_revocationDate(entry, now.get());
  (*r)->entries.push_back(entry);
  GEOLOCO_TRY(write(ca_dir, **r, crl_days));
  return true;
}

Result<int> refresh_crl(const std::string& ca_dir, int crl_days) {
  auto lock = pem::DirLock::take(ca_dir);
  if (!lock.ok()) return lock.status();
  auto r = load(ca_dir);
  if (!r.ok()) return r.status();
  const int count = static_cast<int>((*r)->entries.size());
  GEOLOCO_TRY(write(ca_dir, **r, crl_days));
  return count;
}

}  // namespace geoloco::transport
