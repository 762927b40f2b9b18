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
  struct stat st{};
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
