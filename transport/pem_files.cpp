#include "transport/pem_files.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
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

Status write_pem(const std::string& path, Kind kind, EVP_PKEY* key, X509* cert, X509_CRL* crl) {
  struct stat old{};
  const bool existed = ::stat(path.c_str(), &old) == 0;
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const mode_t mode = existed ? (old.st_mode & 07777) : kind == Kind::key ? 0600 : 0644;
  // Created with its final mode, so a key is never readable by others for a moment.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kind == Kind::key ? 0600 : mode);
  GEOLOCO_RETURN_IF(fd < 0, Err::io, "cannot write ", tmp, ": ", std::strerror(errno));
  FILE* f = ::fdopen(fd, "wb");
  if (f == nullptr) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return GEOLOCO_ERROR(Err::io, "cannot write ", tmp, ": ", std::strerror(errno));
  }
  const int ok = kind == Kind::key    ? PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr)
                 : kind == Kind::cert ? PEM_write_X509(f, cert)
                                      : PEM_write_X509_CRL(f, crl);
  bool written = ok == 1 && std::fflush(f) == 0 && ::fchmod(fd, mode) == 0 && ::fsync(fd) == 0;
  // The owner and group of the file replaced, where this process may set them
  // (root renewing a key that the daemon's user reads); else the caller's.
  if (written && existed && (::fchown(fd, old.st_uid, old.st_gid) != 0)) (void)::fchown(fd, static_cast<uid_t>(-1), old.st_gid);
  written = std::fclose(f) == 0 && written;
  if (written) written = ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!written) {
    const std::string why = ok != 1 ? openssl_error() : std::strerror(errno);
    ::unlink(tmp.c_str());
    return GEOLOCO_ERROR(Err::io, "cannot write ", path, ": ", why);
  }
  return {};
}

Status keep_previous(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) return {};
  const std::string prev = path + ".prev";
  ::unlink(prev.c_str());
  GEOLOCO_RETURN_IF(::link(path.c_str(), prev.c_str()) != 0, Err::io, "cannot keep ", path, " as ", prev, ": ",
                    std::strerror(errno));
  return {};
}

}  // namespace geoloco::transport::pem
