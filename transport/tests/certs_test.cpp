// `geoloco certs init/issue`: a CA and site certificates that OpenSSL
// verifies, named as the site, with keys only their owner can read.
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "transport/certs.h"

using namespace geoloco;
using namespace geoloco::transport;

namespace {
X509* load(const std::filesystem::path& p) {
  FILE* f = std::fopen(p.c_str(), "rb");
  REQUIRE(f != nullptr);
  X509* c = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  REQUIRE(c != nullptr);
  return c;
}

struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("geoloco-certs-" + std::to_string(::getpid()));
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// Verifies `cert` against `ca` as a TLS peer would, at the current time.
int verify(X509* ca, X509* cert) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, cert, nullptr);
  const int ok = X509_verify_cert(ctx);
  const int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return err;
}
}  // namespace

TEST_CASE("a site certificate chains to the federation CA and names the site") {
  TempDir t;
  REQUIRE(create_ca((t.path / "ca").string(), "test federation").ok());
  REQUIRE(issue_site_cert((t.path / "ca").string(), "site-a.eu", (t.path / "a").string()).ok());
  X509* ca = load(t.path / "ca" / "ca.pem");
  X509* cert = load(t.path / "a" / "site.pem");
  CHECK(verify(ca, cert) == X509_V_OK);
  CHECK(X509_check_host(cert, "site-a.eu", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(cert, "site-b.eu", 0, 0, nullptr) != 1);
  CHECK(X509_check_ca(ca) == 1);
  CHECK(X509_check_ca(cert) == 0);  // a site cannot sign other sites
  struct stat st {};
  REQUIRE(::stat((t.path / "a" / "site.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat((t.path / "ca" / "ca.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(std::filesystem::exists(t.path / "a" / "ca.pem"));

  // Another federation's CA does not vouch for this site; expiry is enforced.
  REQUIRE(create_ca((t.path / "other").string(), "other federation").ok());
  X509* other = load(t.path / "other" / "ca.pem");
  CHECK(verify(other, cert) == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
  REQUIRE(issue_site_cert((t.path / "ca").string(), "old", (t.path / "old").string(), {1, -3 * 86400}).ok());
  X509* old = load(t.path / "old" / "site.pem");
  CHECK(verify(ca, old) == X509_V_ERR_CERT_HAS_EXPIRED);
  X509_free(ca);
  X509_free(cert);
  X509_free(other);
  X509_free(old);
}

TEST_CASE("certs refuse bad names, a missing CA, and replacing a CA") {
  TempDir t;
  REQUIRE(create_ca((t.path / "ca").string(), "fed").ok());
  Status again = create_ca((t.path / "ca").string(), "fed");
  CHECK(again.code() == Err::invalid_argument);
  CHECK(again.message().find("refusing to replace") != std::string::npos);
  CHECK(issue_site_cert((t.path / "ca").string(), "Bad_Name", (t.path / "x").string()).message() ==
        "a site name uses only a-z, 0-9, '-' and '.'; 'Bad_Name' does not");
  CHECK(issue_site_cert((t.path / "ca").string(), "", (t.path / "x").string()).message() ==
        "a site name has 1 to 64 characters");
  Status missing = issue_site_cert((t.path / "nope").string(), "a", (t.path / "x").string());
  CHECK(missing.code() == Err::io);
  CHECK(missing.message().find("geoloco certs init") != std::string::npos);
}

namespace {
std::string serial_of(X509* cert) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
  char* hex = BN_bn2hex(bn);
  std::string out = hex;
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

// Verifies `cert` against `ca` and the CRL at `crl_path`, as a site with `tls.crl` does.
int verify_with_crl(X509* ca, X509* cert, const std::filesystem::path& crl_path) {
  FILE* f = std::fopen(crl_path.c_str(), "rb");
  REQUIRE(f != nullptr);
  X509_CRL* crl = PEM_read_X509_CRL(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  REQUIRE(crl != nullptr);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_add_crl(store, crl);
  X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, cert, nullptr);
  const int ok = X509_verify_cert(ctx);
  const int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_CRL_free(crl);
  return err;
}
}  // namespace

TEST_CASE("issuing again renews a site: a new key and certificate, the old pair kept, mode and group kept") {
  TempDir t;
  const auto ca = (t.path / "ca").string();
  const auto dir = t.path / "a";
  REQUIRE(create_ca(ca, "fed").ok());
  REQUIRE(issue_site_cert(ca, "a", dir.string()).ok());
  X509* first = load(dir / "site.pem");
  // The operator made the key readable to the daemon's group.
  REQUIRE(::chmod((dir / "site.key").c_str(), 0640) == 0);
  struct stat before {};
  REQUIRE(::stat((dir / "site.key").c_str(), &before) == 0);

  REQUIRE(issue_site_cert(ca, "a", dir.string(), {30, -300}).ok());
  X509* renewed = load(dir / "site.pem");
  X509* previous = load(dir / "site.pem.prev");
  CHECK(serial_of(renewed) != serial_of(first));
  CHECK(serial_of(previous) == serial_of(first));
  CHECK(X509_cmp(previous, first) == 0);
  struct stat after {};
  REQUIRE(::stat((dir / "site.key").c_str(), &after) == 0);
  CHECK((after.st_mode & 0777) == 0640);
  CHECK(after.st_gid == before.st_gid);
  CHECK(after.st_ino != before.st_ino);  // replaced by rename, never rewritten in place
  CHECK(std::filesystem::exists(dir / "site.key.prev"));
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.insert(entry.path().filename().string());
  CHECK(files == std::set<std::string>{"ca.pem", "site.key", "site.key.prev", "site.pem", "site.pem.prev"});
  X509* ca_cert = load(t.path / "ca" / "ca.pem");
  CHECK(verify(ca_cert, renewed) == X509_V_OK);
  X509_free(first);
  X509_free(renewed);
  X509_free(previous);
  X509_free(ca_cert);
}

TEST_CASE("a renewal through a symbolic link keeps the link, and a CA bundle that holds the CA stays as it is") {
  TempDir t;
  const auto ca = (t.path / "ca").string();
  const auto dir = t.path / "b";
  REQUIRE(create_ca(ca, "fed").ok());
  REQUIRE(create_ca((t.path / "next-ca").string(), "next").ok());
  REQUIRE(issue_site_cert(ca, "b", dir.string()).ok());
  // The operator keeps the certificate elsewhere and trusts two CAs.
  std::filesystem::create_directories(dir / "store");
  std::filesystem::rename(dir / "site.pem", dir / "store" / "site.pem");
  std::filesystem::create_symlink("store/site.pem", dir / "site.pem");
  {
    std::ofstream bundle(dir / "ca.pem", std::ios::app);
    std::ifstream next(t.path / "next-ca" / "ca.pem");
    bundle << next.rdbuf();
  }
  const auto bundle_size = std::filesystem::file_size(dir / "ca.pem");
  X509* before = load(dir / "store" / "site.pem");

  REQUIRE(issue_site_cert(ca, "b", dir.string()).ok());
  CHECK(std::filesystem::is_symlink(dir / "site.pem"));
  X509* after = load(dir / "store" / "site.pem");
  CHECK(serial_of(after) != serial_of(before));
  CHECK(std::filesystem::file_size(dir / "ca.pem") == bundle_size);
  X509* previous = load(dir / "store" / "site.pem.prev");
  CHECK(serial_of(previous) == serial_of(before));
  X509_free(previous);
  X509_free(before);
  X509_free(after);
}

TEST_CASE("a revoked certificate is listed in the CA's CRL; the others still verify") {
  TempDir t;
  const auto ca = (t.path / "ca").string();
  REQUIRE(create_ca(ca, "fed").ok());
  REQUIRE(issue_site_cert(ca, "a", (t.path / "a").string()).ok());
  REQUIRE(issue_site_cert(ca, "b", (t.path / "b").string()).ok());
  const auto crl = t.path / "ca" / "crl.pem";

  auto empty = refresh_crl(ca, 30);
  REQUIRE(empty.ok());
  CHECK(*empty == 0);
  X509* ca_cert = load(t.path / "ca" / "ca.pem");
  X509* a = load(t.path / "a" / "site.pem");
  X509* b = load(t.path / "b" / "site.pem");
  CHECK(verify_with_crl(ca_cert, a, crl) == X509_V_OK);

  auto revoked = revoke_cert(ca, (t.path / "b" / "site.pem").string(), 30);
  REQUIRE(revoked.ok());
  CHECK(*revoked);
  CHECK(verify_with_crl(ca_cert, b, crl) == X509_V_ERR_CERT_REVOKED);
  CHECK(verify_with_crl(ca_cert, a, crl) == X509_V_OK);
  auto twice = revoke_cert(ca, (t.path / "b" / "site.pem").string(), 30);
  REQUIRE(twice.ok());
  CHECK_FALSE(*twice);
  auto count = refresh_crl(ca, 60);
  REQUIRE(count.ok());
  CHECK(*count == 1);
  CHECK(verify_with_crl(ca_cert, b, crl) == X509_V_ERR_CERT_REVOKED);  // a refresh keeps the list

  // Another federation's certificate cannot be revoked by this CA; bad days are refused.
  REQUIRE(create_ca((t.path / "other").string(), "other").ok());
  REQUIRE(issue_site_cert((t.path / "other").string(), "x", (t.path / "x").string()).ok());
  auto foreign = revoke_cert(ca, (t.path / "x" / "site.pem").string(), 30);
  CHECK(foreign.status().code() == Err::invalid_argument);
  CHECK_THAT(foreign.status().message(), Catch::Contains("was not issued by the CA in"));
  CHECK(refresh_crl(ca, 0).status().message() == "a CRL is valid for at least 1 day, got 0");
  X509_free(ca_cert);
  X509_free(a);
  X509_free(b);
}
