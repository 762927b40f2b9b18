#include "common/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace geoloco {

namespace fs = std::filesystem;

namespace {

Status errno_status(std::string_view what, const fs::path& path) {
  return GEOLOCO_ERROR(Err::io, what, " ", path.string(), ": ", std::strerror(errno));
}

Status write_all(int fd, std::span<const std::byte> bytes, const fs::path& path) {
  const std::byte* p = bytes.data();
  std::size_t size = bytes.size();
  while (size > 0) {
    // At most 1 GiB per call: Linux caps a single write below 2 GiB anyway.
    const ssize_t n = ::write(fd, p, std::min<std::size_t>(size, 1u << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("cannot write", path);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

Status write_file_durably(const fs::path& path, const std::function<Status(const FileSink&)>& fill) {
  const fs::path tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create", tmp);
  const Status written = [&]() -> Status {
    GEOLOCO_TRY(fill([&](std::span<const std::byte> bytes) { return write_all(fd, bytes, tmp); }));
    // The data must be on disk before the rename gives it the name;
    // otherwise a crash could leave the name pointing at missing blocks.
    if (::fsync(fd) != 0) return errno_status("cannot fsync", tmp);
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0) return errno_status("cannot close", tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) return errno_status("cannot rename into place", path);
    return {};
  }();
  if (fd >= 0) ::close(fd);
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return written;
  }
  // And the rename itself must be durable: fsync the directory entry.
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno_status("cannot open directory", dir);
  const bool synced = ::fsync(dfd) == 0;
  const Status status = synced ? Status() : errno_status("cannot fsync directory", dir);
  ::close(dfd);
  return status;
}

}  // namespace geoloco
