// PEM files of the federation's PKI, read and written with OpenSSL: keys,
// certificates and CRLs. Internal to transport/ (certs.cpp, crl.cpp).
//
// A write replaces its file atomically (a temporary of its own beside it,
// fsync'd, renamed, the folder fsync'd), so a daemon reloading its TLS files
// never reads half of one; a file that existed keeps its mode, owner and
// group (a key that the daemon's user reads stays readable to it), or is
// not replaced; a symbolic link stays a link to the new file.
#pragma once

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace geoloco::transport::pem {

template <class T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PKeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using CrlPtr = std::unique_ptr<X509_CRL, Deleter<X509_CRL, X509_CRL_free>>;

/// The oldest OpenSSL error queued, in words (and the queue cleared).
std::string openssl_error();
/// `dir`/`file`.
std::string join(const std::string& dir, const char* file);

/// Errors: io (missing file, with `hint`), invalid_argument (not PEM of that kind).
Result<PKeyPtr> read_key(const std::string& path, const char* hint = "");
Result<X509Ptr> read_cert(const std::string& path);
Result<CrlPtr> read_crl(const std::string& path);

enum class Kind { key, cert, crl };
/// Writes one PEM object to `path`, atomically. A new key file is 0600 from
/// its first byte, a new certificate or CRL 0644. Errors: io (including an
/// existing file whose owner this process cannot give the new one).
Status write_pem(const std::string& path, Kind kind, EVP_PKEY* key, X509* cert, X509_CRL* crl);

/// An exclusive lock on a folder (flock), held while the object lives: two
/// `geoloco certs revoke` at once must not each write the list without the
/// other's entry.
class DirLock {
 public:
  /// Waits for the lock. Errors: io.
  static Result<DirLock> take(const std::string& dir);
  DirLock(DirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock();

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

/// Keeps the current `path` (if any) as `path`.prev, as a second name for
/// the same file, before a write_pem replaces it (for a link: beside the
/// file it points to). Errors: io.
Status keep_previous(const std::string& path);

}  // namespace geoloco::transport::pem
