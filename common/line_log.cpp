#include "common/line_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/digest.h"

namespace geoloco {

namespace {

Status write_all(int fd, std::string_view data, const std::string& what) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    GEOLOCO_RETURN_IF(n < 0, Err::io, what, ": write failed: ", std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

LineLog::LineLog(LineLog&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      what_(std::move(o.what_)),
      lines_(std::move(o.lines_)),
      dropped_bytes_(o.dropped_bytes_),
      broken_(o.broken_) {}

LineLog& LineLog::operator=(LineLog&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    what_ = std::move(o.what_);
    lines_ = std::move(o.lines_);
    dropped_bytes_ = o.dropped_bytes_;
    broken_ = o.broken_;
  }
  return *this;
}

LineLog::~LineLog() {
  if (fd_ >= 0) ::close(fd_);
}

Result<LineLog> LineLog::open(const std::string& path, const std::string& what, const LineCheck& check) {
  const std::string named = cat(what, " ", path);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  GEOLOCO_RETURN_IF(fd < 0, Err::io, "cannot open ", named, ": ", std::strerror(errno));
  LineLog log(fd, path, named);
  std::string content;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    GEOLOCO_RETURN_IF(n < 0, Err::io, "cannot read ", named, ": ", std::strerror(errno));
    if (n == 0) break;
    content.append(buf, static_cast<std::size_t>(n));
  }
  std::size_t good = 0;  // bytes of complete, intact lines
  while (good < content.size()) {
    const std::size_t end = content.find('\n', good);
    if (end == std::string::npos) break;  // torn: no newline yet
    const std::string_view line = std::string_view(content).substr(good, end - good);
    if (!check(line)) break;  // damaged: everything after it is suspect
    log.lines_.emplace_back(line);
    good = end + 1;
  }
  log.dropped_bytes_ = content.size() - good;
  if (log.dropped_bytes_ > 0) {
    GEOLOCO_RETURN_IF(::ftruncate(fd, static_cast<off_t>(good)) != 0 || ::fdatasync(fd) != 0, Err::io,
                      "cannot truncate the torn tail of ", named, ": ", std::strerror(errno));
  }
  GEOLOCO_RETURN_IF(::lseek(fd, 0, SEEK_END) < 0, Err::io, named, ": ", std::strerror(errno));
  return log;
}

Status LineLog::append(std::string_view line) {
  const std::string one(line);
  return append(std::span<const std::string>(&one, 1));
}

Status LineLog::append(std::span<const std::string> lines) {
  std::string data;
  for (const auto& line : lines) {
    GEOLOCO_RETURN_IF(line.find('\n') != std::string::npos, Err::invalid_argument, what_,
                      ": a line to append holds a newline");
    data += line;
    data += '\n';
  }
  GEOLOCO_RETURN_IF(broken_, Err::io, what_, ": a failed write could not be undone; no line is appended after it");
  if (data.empty()) return {};
  const off_t end = ::lseek(fd_, 0, SEEK_CUR);
  GEOLOCO_RETURN_IF(end < 0, Err::io, what_, ": ", std::strerror(errno));
  Status written = write_all(fd_, data, what_);
  if (written.ok() && ::fdatasync(fd_) != 0)
    written = GEOLOCO_ERROR(Err::io, what_, ": fdatasync failed: ", std::strerror(errno));
  if (!written.ok()) {
    // A write cut short (a full disk) must not leave half a line for the
    // next one to be glued to: the file goes back to its last whole line.
    if (::ftruncate(fd_, end) != 0 || ::lseek(fd_, end, SEEK_SET) != end) broken_ = true;
  }
  return written;
}

std::string hashed_line(std::string_view text) {
  return cat(digest_hex(xxh3_64(std::as_bytes(std::span(text.data(), text.size())))), " ", text);
}

std::optional<std::string_view> hashed_line_text(std::string_view line) {
  if (line.size() < 17 || line[16] != ' ') return std::nullopt;
  const std::string_view text = line.substr(17);
  if (line.substr(0, 16) != digest_hex(xxh3_64(std::as_bytes(std::span(text.data(), text.size())))))
    return std::nullopt;
  return text;
}

}  // namespace geoloco
