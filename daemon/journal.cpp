#include "daemon/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "common/digest.h"

namespace geoloco::daemon {

namespace {

std::string line_for(const std::string& text) {
  return digest_hex(xxh3_64(std::as_bytes(std::span(text.data(), text.size())))) + " " + text + "\n";
}

// The record in one line (without its newline), or nothing when the line is
// damaged.
std::optional<nlohmann::json> parse_line(std::string_view line) {
  if (line.size() < 18 || line[16] != ' ') return std::nullopt;
  const std::string_view text = line.substr(17);
  const std::string expected = digest_hex(xxh3_64(std::as_bytes(std::span(text.data(), text.size()))));
  if (line.substr(0, 16) != expected) return std::nullopt;
  auto record = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) return std::nullopt;
  return record;
}

Status write_all(int fd, const std::string& data, const std::string& path) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    GEOLOCO_RETURN_IF(n < 0, Err::io, "journal ", path, ": write failed: ", std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

Journal::Journal(Journal&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      records_(std::move(o.records_)),
      dropped_bytes_(o.dropped_bytes_) {}

Journal& Journal::operator=(Journal&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    records_ = std::move(o.records_);
    dropped_bytes_ = o.dropped_bytes_;
  }
  return *this;
}

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Journal> Journal::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  GEOLOCO_RETURN_IF(fd < 0, Err::io, "cannot open journal ", path, ": ", std::strerror(errno));
  Journal j(fd, path);
  std::string content;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    GEOLOCO_RETURN_IF(n < 0, Err::io, "cannot read journal ", path, ": ", std::strerror(errno));
    if (n == 0) break;
    content.append(buf, static_cast<std::size_t>(n));
  }
  std::size_t good = 0;  // bytes of complete, valid records
  while (good < content.size()) {
    const std::size_t end = content.find('\n', good);
    if (end == std::string::npos) break;  // torn: no newline yet
    auto record = parse_line(std::string_view(content).substr(good, end - good));
    if (!record) break;  // damaged: everything after it is suspect
    j.records_.push_back(std::move(*record));
    good = end + 1;
  }
  j.dropped_bytes_ = content.size() - good;
  if (j.dropped_bytes_ > 0) {
    GEOLOCO_RETURN_IF(::ftruncate(fd, static_cast<off_t>(good)) != 0 || ::fdatasync(fd) != 0, Err::io,
                      "cannot truncate the torn tail of journal ", path, ": ", std::strerror(errno));
  }
  GEOLOCO_RETURN_IF(::lseek(fd, 0, SEEK_END) < 0, Err::io, "journal ", path, ": ", std::strerror(errno));
  return j;
}

Status Journal::append(const nlohmann::json& record) {
  const std::string line = line_for(record.dump());
  GEOLOCO_TRY(write_all(fd_, line, path_));
  GEOLOCO_RETURN_IF(::fdatasync(fd_) != 0, Err::io, "journal ", path_, ": fdatasync failed: ", std::strerror(errno));
  records_.push_back(record);
  return {};
}

JournalSummary summarize_journal(const std::vector<nlohmann::json>& records) {
  JournalSummary s;
  std::uint64_t planned_round = 0, planned_attempt = 0;
  for (const auto& r : records) {
    const std::string type = r.value("type", "");
    if (type == "plan") {
      planned_round = r.value("round", std::uint64_t{0});
      planned_attempt = r.value("attempt", std::uint64_t{0});
    } else if (type == "committed") {
      s.round = r.value("round", std::uint64_t{0});
      s.digest = r.value("anchor_digest", std::string());
      s.tokens = r.value("tokens", std::uint64_t{0});
      s.final = r.value("final", false);
    }
  }
  s.next_attempt = planned_round == s.round + 1 ? planned_attempt + 1 : 0;
  return s;
}

}  // namespace geoloco::daemon
