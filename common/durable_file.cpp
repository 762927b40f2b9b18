#include "common/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace geoloco {

namespace fs = std::filesystem;

namespace {

// The alignment of a direct write's buffer, offset and size: 4 KiB suits
// disks of 512-byte and of 4 KiB sectors.
constexpr std::size_t kDirectAlign = 4096;
static_assert(kDirectChunk % kDirectAlign == 0);

Status errno_status(std::string_view what, const fs::path& path) {
  return GEOLOCO_ERROR(Err::io, what, " ", path.string(), ": ", std::strerror(errno));
}

// write(2) until every byte is written. Sets errno on failure.
bool write_all(int fd, const std::byte* p, std::size_t size) {
  while (size > 0) {
    // At most 1 GiB per call: Linux caps a single write below 2 GiB anyway.
    const ssize_t n = ::write(fd, p, std::min<std::size_t>(size, 1u << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Whether the file's status flags could be set to include (or not) O_DIRECT.
bool set_direct(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  return ::fcntl(fd, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT)) == 0;
}

// Gathers what the sink is given into an aligned buffer; each full buffer
// goes to the disk directly when the filesystem allows it.
class GatheringWriter {
 public:
  GatheringWriter(int fd, fs::path path) : fd_(fd), path_(std::move(path)) {}

  Status put(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      if (!buffer_) {
        // The first bytes: a small file is written in one call, through the page cache.
        buffer_.reset(static_cast<std::byte*>(std::aligned_alloc(kDirectAlign, kDirectChunk)));
        if (!buffer_) return GEOLOCO_ERROR(Err::io, "cannot allocate a write buffer for ", path_.string());
      }
      const std::size_t take = std::min(bytes.size(), kDirectChunk - used_);
      std::memcpy(buffer_.get() + used_, bytes.data(), take);
      used_ += take;
      bytes = bytes.subspan(take);
      if (used_ == kDirectChunk) GEOLOCO_TRY(flush_full());
    }
    return {};
  }

  // The last partial buffer: padded to the alignment and written directly,
  // then the file cut to its size; or written through the page cache.
  Status finish() {
    if (used_ > 0) {
      if (direct_) {
        const std::size_t padded = (used_ + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
        std::memset(buffer_.get() + used_, 0, padded - used_);
        if (write_all(fd_, buffer_.get(), padded)) {
          written_ += used_;
          direct_bytes_ += used_;
          used_ = 0;
          if (::ftruncate(fd_, static_cast<off_t>(written_)) != 0) return errno_status("cannot truncate", path_);
          return {};
        }
        if (errno != EINVAL || !set_direct(fd_, false)) return errno_status("cannot write", path_);
        direct_ = false;  // refused: the page cache takes the rest
        if (::lseek(fd_, static_cast<off_t>(written_), SEEK_SET) < 0) return errno_status("cannot seek in", path_);
      }
      if (!write_all(fd_, buffer_.get(), used_)) return errno_status("cannot write", path_);
      written_ += used_;
      used_ = 0;
    }
    return {};
  }

  DurableWrite how() const { return {written_, direct_bytes_}; }

 private:
  Status flush_full() {
    if (!tried_direct_) {
      tried_direct_ = true;
      direct_ = set_direct(fd_, true);
    }
    if (direct_) {
      if (write_all(fd_, buffer_.get(), kDirectChunk)) {
        written_ += kDirectChunk;
        direct_bytes_ += kDirectChunk;
        used_ = 0;
        return {};
      }
      // A filesystem that takes the flag at open but not the write (EINVAL):
      // the page cache it is, from where the file stands.
      if (errno != EINVAL || !set_direct(fd_, false)) return errno_status("cannot write", path_);
      direct_ = false;
      if (::lseek(fd_, static_cast<off_t>(written_), SEEK_SET) < 0) return errno_status("cannot seek in", path_);
    }
    if (!write_all(fd_, buffer_.get(), kDirectChunk)) return errno_status("cannot write", path_);
    written_ += kDirectChunk;
    used_ = 0;
    return {};
  }

  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  int fd_;
  fs::path path_;
  std::unique_ptr<std::byte, Free> buffer_;
  std::size_t used_ = 0;
  std::uint64_t written_ = 0, direct_bytes_ = 0;
  bool tried_direct_ = false, direct_ = false;
};

}  // namespace

Status write_file_durably(const fs::path& path, const std::function<Status(const FileSink&)>& fill, DurableWrite* how) {
  const fs::path tmp = path.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create", tmp);
  GatheringWriter writer(fd, tmp);
  const Status written = [&]() -> Status {
    GEOLOCO_TRY(fill([&](std::span<const std::byte> bytes) { return writer.put(bytes); }));
    GEOLOCO_TRY(writer.finish());
    // The data must be on disk before the rename gives it the name;
    // otherwise a crash could leave the name pointing at missing blocks.
    // (Direct writes skip the page cache, not the disk's own cache, nor the
    // file's size and block map: fsync still makes them durable.)
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
  if (how) *how = writer.how();
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
