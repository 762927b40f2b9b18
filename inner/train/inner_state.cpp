#include "inner/train/inner_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/byte_io.h"
#include "common/digest.h"

namespace geoloco::inner {

namespace {

constexpr std::uint32_t kMagic = 0x53494c47u;  // "GLIS" on disk
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 4 + 4 + 8 * 5;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  /// Closes now, reporting the error a deferred write may return here.
  int close() {
    const int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

Status write_all(int fd, std::span<const std::byte> bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    GEOLOCO_RETURN_IF(n <= 0, Err::io, "cannot write ", path, ": ", std::strerror(errno));
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

std::span<const std::byte> bytes_of(std::span<const float> v) { return std::as_bytes(v); }

}  // namespace

std::string inner_state_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "inner_state.bin").string();
}

std::uint64_t layout_digest(const ParamLayout& layout) {
  std::string text;
  for (const auto& t : layout.tensors()) {
    text += t.name;
    for (std::size_t d : t.shape) text += cat(" ", d);
    text += ";";
  }
  return xxh3_64(std::as_bytes(std::span(text.data(), text.size())));
}

Status save_inner_state(const std::string& dir, std::uint64_t round, std::uint64_t steps_done,
                        std::uint64_t adamw_steps, std::uint64_t layout_digest, std::span<const float> m,
                        std::span<const float> v) {
  GEOLOCO_RETURN_IF(m.size() != v.size(), Err::invalid_argument, "inner state: moments of ", m.size(), " and ",
                    v.size(), " values");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot create the state folder ", dir, ": ", ec.message());
  const std::string path = inner_state_path(dir);
  const std::string tmp = path + ".tmp";

  std::array<std::byte, kHeaderBytes> header;
  ByteWriter w(header);
  w.put(kMagic);
  w.put(kVersion);
  w.put(round);
  w.put(steps_done);
  w.put(adamw_steps);
  w.put(static_cast<std::uint64_t>(m.size()));
  w.put(layout_digest);
  GEOLOCO_RETURN_IF(w.failed() || w.size() != kHeaderBytes, Err::internal, "inner state header size");
  // The trailing digest: xxh3 of the three parts' digests (common/digest.h
  // hashes whole spans; this avoids a copy of the moments).
  const std::uint64_t parts[3] = {xxh3_64(header), xxh3_64(bytes_of(m)), xxh3_64(bytes_of(v))};
  const std::uint64_t digest = xxh3_64(std::as_bytes(std::span(parts)));

  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    GEOLOCO_RETURN_IF(fd.get() < 0, Err::io, "cannot create ", tmp, ": ", std::strerror(errno));
    GEOLOCO_TRY(write_all(fd.get(), header, tmp));
    GEOLOCO_TRY(write_all(fd.get(), bytes_of(m), tmp));
    GEOLOCO_TRY(write_all(fd.get(), bytes_of(v), tmp));
    GEOLOCO_TRY(write_all(fd.get(), std::as_bytes(std::span(&digest, 1)), tmp));
    GEOLOCO_RETURN_IF(::fsync(fd.get()) != 0, Err::io, "cannot fsync ", tmp, ": ", std::strerror(errno));
    GEOLOCO_RETURN_IF(fd.close() != 0, Err::io, "cannot close ", tmp, ": ", std::strerror(errno));
  }
  GEOLOCO_RETURN_IF(::rename(tmp.c_str(), path.c_str()) != 0, Err::io, "cannot rename ", tmp, " to ", path, ": ",
                    std::strerror(errno));
  // The rename is durable once the folder's entry is.
  Fd folder(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  GEOLOCO_RETURN_IF(folder.get() < 0, Err::io, "cannot open ", dir, ": ", std::strerror(errno));
  GEOLOCO_RETURN_IF(::fsync(folder.get()) != 0, Err::io, "cannot fsync ", dir, ": ", std::strerror(errno));
  return {};
}

Result<std::optional<InnerState>> load_inner_state(const std::string& dir) {
  const std::string path = inner_state_path(dir);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 && errno == ENOENT) return std::optional<InnerState>();
  GEOLOCO_RETURN_IF(fd.get() < 0, Err::io, "cannot open ", path, ": ", std::strerror(errno));
  const off_t size = ::lseek(fd.get(), 0, SEEK_END);
  GEOLOCO_RETURN_IF(size < 0 || ::lseek(fd.get(), 0, SEEK_SET) != 0, Err::io, "cannot seek in ", path, ": ",
                    std::strerror(errno));
  auto read_exact = [&](std::span<std::byte> out) -> Status {
    while (!out.empty()) {
      const ssize_t n = ::read(fd.get(), out.data(), out.size());
      if (n < 0 && errno == EINTR) continue;
      GEOLOCO_RETURN_IF(n < 0, Err::io, "cannot read ", path, ": ", std::strerror(errno));
      GEOLOCO_RETURN_IF(n == 0, Err::truncated, path, " ends early");
      out = out.subspan(static_cast<std::size_t>(n));
    }
    return {};
  };
  std::array<std::byte, kHeaderBytes> header;
  GEOLOCO_RETURN_IF(static_cast<std::uint64_t>(size) < kHeaderBytes + 8, Err::truncated, path, " holds ", size,
                    " bytes, less than a header");
  GEOLOCO_TRY(read_exact(header));
  ByteReader r(header);
  const auto magic = r.get<std::uint32_t>();
  const auto version = r.get<std::uint32_t>();
  InnerState s;
  s.round = r.get<std::uint64_t>();
  s.steps_done = r.get<std::uint64_t>();
  s.adamw_steps = r.get<std::uint64_t>();
  const auto n = r.get<std::uint64_t>();
  s.layout_digest = r.get<std::uint64_t>();
  GEOLOCO_RETURN_IF(magic != kMagic, Err::malformed, path, " is not an inner state file (bad magic)");
  GEOLOCO_RETURN_IF(version != kVersion, Err::unsupported, path, " has version ", version, ", this trainer reads ",
                    kVersion);
  // Check the length against the file before allocating 8 bytes per value.
  const std::uint64_t body = static_cast<std::uint64_t>(size) - kHeaderBytes - 8;
  GEOLOCO_RETURN_IF(n > body / 8 || n * 8 != body, Err::too_large, path, " says ", n, " values, its size (", size,
                    " bytes) holds ", body / 8);
  s.m.resize(n);
  s.v.resize(n);
  std::uint64_t digest = 0;
  GEOLOCO_TRY(read_exact(std::as_writable_bytes(std::span(s.m))));
  GEOLOCO_TRY(read_exact(std::as_writable_bytes(std::span(s.v))));
  GEOLOCO_TRY(read_exact(std::as_writable_bytes(std::span(&digest, 1))));
  const std::uint64_t parts[3] = {xxh3_64(header), xxh3_64(bytes_of(s.m)), xxh3_64(bytes_of(s.v))};
  GEOLOCO_RETURN_IF(xxh3_64(std::as_bytes(std::span(parts))) != digest, Err::malformed, path,
                    ": digest mismatch (the file is damaged)");
  return std::optional<InnerState>(std::move(s));
}

StateChoice choose_inner_state(const Result<std::optional<InnerState>>& loaded, const std::string& dir,
                               std::uint64_t round, std::uint64_t layout_digest, std::size_t values) {
  const std::string path = inner_state_path(dir);
  if (!loaded.ok())
    return {false, cat(path, " is unreadable (", loaded.status().message(), "): starting round ", round,
                       " with zero AdamW moments")};
  if (!loaded->has_value())
    return {false, cat("no saved inner state in ", dir, ": starting round ", round, " with zero AdamW moments")};
  const InnerState& s = **loaded;
  if (s.layout_digest != layout_digest || s.m.size() != values)
    return {false, cat(path, " was saved by another model (", s.m.size(), " values, layout ",
                       digest_hex(s.layout_digest), "; this one has ", values, ", layout ", digest_hex(layout_digest),
                       "): starting round ", round, " with zero AdamW moments")};
  if (s.round != round)
    return {false,
            cat(path, " belongs to round ", s.round, ", this trainer starts round ", round, ": zero AdamW moments")};
  return {true, cat("loaded ", path, ": round ", s.round, ", step ", s.steps_done, ", AdamW step ", s.adamw_steps)};
}

}  // namespace geoloco::inner
