#include "transport/pem_files.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace geoloco::transport::pem {

std::string openssl_error() {
  char buf[256];
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

std::string join(const std::string& dir, const char* file) { return (std::filesystem::path(dir) / file).string(); }

Result<PKeyPtr> read_key(const std::string& path, const char* hint) {
  FILE* f = std::fopen(path.c_str(), "rb");
  GEOLOCO_RETURN_IF(f == nullptr, Err::io, "cannot read ", path, hint);
  PKeyPtr key(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  GEOLOCO_RETURN_IF(!key, Err::invalid_argument, path, " is not a PEM private key: ", openssl_error());
  return key;
}

Result<X509Ptr> read_cert(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  GEOLOCO_RETURN_IF(f == nullptr, Err::io, "cannot read ", path);
  X509Ptr cert(PEM_read_X509(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  GEOLOCO_RETURN_IF(!cert, Err::invalid_argument, path, " is not a PEM certificate: ", openssl_error());
  return cert;
}

Result<CrlPtr> read_crl(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  GEOLOCO_RETURN_IF(f == nullptr, Err::io, "cannot read ", path);
  CrlPtr crl(PEM_read_X509_CRL(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  GEOLOCO_RETURN_IF(!crl, Err::invalid_argument, path, " is not a PEM certificate revocation list: ", openssl_error());
  return crl;
}

Status write_pem(const std::string& requested, Kind kind, EVP_PKEY* key, X509* cert, X509_CRL* crl) {
  // A symbolic link (certbot's live/ folder, say) stays one: its target is replaced.
  std::string path = requested;
  std::error_code ec;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(requested, ec))) {
    path = std::filesystem::canonical(requested, ec).string();
    GEOLOCO_RETURN_IF(ec, Err::io, "cannot follow the link ", requested, ": ", ec.message());
  }
  struct stat old {};
  const bool existed = ::stat(path.c_str(), &old) == 0;
  const mode_t mode = existed ? (old.st_mode & 07777) : kind == Kind::key ? 0600 : 0644;
  // A name of its own beside the file (two writers never share one), made
  // 0600 so a key is never readable by others for a moment.
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  GEOLOCO_RETURN_IF(fd < 0, Err::io, "cannot write beside ", path, ": ", std::strerror(errno));
  auto fail = [&](const std::string& why) {
    ::unlink(tmp.c_str());
    return GEOLOCO_ERROR(Err::io, "cannot write ", path, ": ", why);
  };
  // The replaced file's owner and group first, then its mode: a key the
  // daemon's user reads stays readable to it. When this process may not
  // give the file back to its owner, nothing is replaced.
  if (existed && (old.st_uid != ::geteuid() || old.st_gid != ::getegid()) &&
      ::fchown(fd, old.st_uid, old.st_gid) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return fail(cat("it belongs to uid ", old.st_uid, " gid ", old.st_gid,
                    ", and this user cannot make the new one "
                    "theirs (",
                    why, "): run this as root or as that user"));
  }
  FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return fail(why);
  }
  const int ok = kind == Kind::key    ? PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr)
                 : kind == Kind::cert ? PEM_write_X509(f, cert)
                                      : PEM_write_X509_CRL(f, crl);
  bool written = ok == 1 && std::fflush(f) == 0 && ::fchmod(fd, mode) == 0 && ::fsync(fd) == 0;
  const std::string why = ok != 1 ? openssl_error() : std::strerror(errno);
  written = std::fclose(f) == 0 && written;
  if (!written) return fail(why);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(std::strerror(errno));
  // The rename itself survives a crash once the folder is on disk too.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

Result<DirLock> DirLock::take(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  GEOLOCO_RETURN_IF(fd < 0, Err::io, "cannot open ", dir, ": ", std::strerror(errno));
  if (::flock(fd, LOCK_EX) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return GEOLOCO_ERROR(Err::io, "cannot lock ", dir, ": ", why);
  }
  return DirLock(fd);
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

Status keep_previous(const std::string& requested) {
  if (::access(requested.c_str(), F_OK) != 0) return {};
  // Beside the file a link points to: that file is the one replaced.
  std::error_code ec;
  const std::string path = std::filesystem::canonical(requested, ec).string();
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot follow ", requested, ": ", ec.message());
  const std::string prev = path + ".prev";
  ::unlink(prev.c_str());
  GEOLOCO_RETURN_IF(::link(path.c_str(), prev.c_str()) != 0, Err::io, "cannot keep ", path, " as ", prev, ": ",
                    std::strerror(errno));
  return {};
}

}  // namespace geoloco::transport::pem
