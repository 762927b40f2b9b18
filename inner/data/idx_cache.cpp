#include "inner/data/idx_cache.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "common/digest.h"

namespace geoloco::inner {

namespace {

constexpr std::array<char, 8> kMagic{'G', 'L', 'I', 'D', 'X', 'C', '1', '\n'};
constexpr std::size_t kHeaderBytes = 8 + 4 * 8;

struct Header {
  std::uint64_t source_size = 0;
  std::uint64_t source_mtime_ns = 0;
  std::uint64_t raw_size = 0;
  std::uint64_t raw_digest = 0;
};

void put_u64(char* out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint64_t get_u64(const char* in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

std::array<char, kHeaderBytes> encode(const Header& h) {
  std::array<char, kHeaderBytes> out{};
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  put_u64(out.data() + 8, h.source_size);
  put_u64(out.data() + 16, h.source_mtime_ns);
  put_u64(out.data() + 24, h.raw_size);
  put_u64(out.data() + 32, h.raw_digest);
  return out;
}

std::uint64_t digest(const std::vector<std::uint8_t>& bytes) {
  return xxh3_64(std::as_bytes(std::span<const std::uint8_t>(bytes)));
}

/// The source's size and modification time; nullopt when it cannot be stat'ed
/// (then the load itself reports why).
std::optional<Header> source_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  Header h;
  h.source_size = static_cast<std::uint64_t>(st.st_size);
  h.source_mtime_ns =
      static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
  return h;
}

/// The cached bytes when the cache file matches `source` in every field and
/// its data in digest; nullopt otherwise.
std::optional<std::vector<std::uint8_t>> read_cached(const std::string& cache_path, const Header& source) {
  std::ifstream in(cache_path, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  const std::streamoff size = in.tellg();
  if (size < static_cast<std::streamoff>(kHeaderBytes)) return std::nullopt;
  std::array<char, kHeaderBytes> head{};
  in.seekg(0);
  if (!in.read(head.data(), head.size())) return std::nullopt;
  if (std::memcmp(head.data(), kMagic.data(), kMagic.size()) != 0) return std::nullopt;
  const Header h{get_u64(head.data() + 8), get_u64(head.data() + 16), get_u64(head.data() + 24),
                 get_u64(head.data() + 32)};
  if (h.source_size != source.source_size || h.source_mtime_ns != source.source_mtime_ns) return std::nullopt;
  if (h.raw_size > kMaxIdxBytes || static_cast<std::uint64_t>(size) != kHeaderBytes + h.raw_size) return std::nullopt;
  std::vector<std::uint8_t> raw(h.raw_size);
  if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()))) return std::nullopt;
  if (digest(raw) != h.raw_digest) return std::nullopt;
  return raw;
}

/// cache_room_refusal() for the disk that holds `dir`.
std::string room_for(const std::string& dir, std::size_t bytes) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0)
    return cat("cannot read the free space of ", dir, " (", std::strerror(errno), ")");
  const std::uint64_t unit = fs.f_frsize ? fs.f_frsize : fs.f_bsize;
  const std::string why =
      cache_room_refusal(std::uint64_t{fs.f_bavail} * unit, std::uint64_t{fs.f_blocks} * unit, bytes);
  return why.empty() ? why : cat(dir, ": ", why);
}

/// Writes the cache file under a temporary name and renames it into place,
/// so a reader sees the old file or the whole new one. Returns why not.
std::string write_cache(const std::string& cache_dir, const std::string& cache_path, Header h,
                        const std::vector<std::uint8_t>& raw) {
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) return cat("cannot create ", cache_dir, " (", ec.message(), ")");
  if (std::string why = room_for(cache_dir, kHeaderBytes + raw.size()); !why.empty()) return why;
  h.raw_size = raw.size();
  h.raw_digest = digest(raw);
  const std::string tmp = cat(cache_path, ".tmp-", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return cat("cannot write ", tmp, " (", std::strerror(errno), ")");
    const auto head = encode(h);
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    out.write(reinterpret_cast<const char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return cat("cannot write ", tmp, " (the disk may be full)");
    }
  }
  std::filesystem::rename(tmp, cache_path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return cat("cannot rename ", tmp, " to ", cache_path, " (", ec.message(), ")");
  }
  return {};
}

}  // namespace

std::string cache_room_refusal(std::uint64_t free, std::uint64_t total, std::uint64_t bytes) {
  const std::uint64_t keep = std::max<std::uint64_t>(bytes, total / 10);
  if (free >= bytes && free - bytes >= keep) return {};
  return cat(free >> 20, " MiB free of ", total >> 20, " MiB; a cache of ", bytes >> 20, " MiB would leave less than ",
             keep >> 20, " MiB");
}

std::string idx_cache_path(const std::string& path, const std::string& cache_dir) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.size() > 3 && name.ends_with(".gz")) name.resize(name.size() - 3);
  const std::string absolute = std::filesystem::absolute(path).lexically_normal().string();
  const std::uint64_t where = xxh3_64(std::as_bytes(std::span<const char>(absolute.data(), absolute.size())));
  return (std::filesystem::path(cache_dir) / cat(name, "-", digest_hex(where).substr(0, 8), ".cache")).string();
}

Result<CachedIdx> read_idx_gz_cached(const std::string& path, std::size_t rank, const std::string& cache_dir) {
  const auto source = cache_dir.empty() ? std::nullopt : source_identity(path);
  if (!source) {
    auto a = read_idx_gz(path, rank);
    if (!a.ok()) return a.status();
    return CachedIdx{std::move(*a), "decompressed"};
  }
  const std::string cache_path = idx_cache_path(path, cache_dir);
  if (auto raw = read_cached(cache_path, *source)) {
    // A cache that does not parse (it never should) is rebuilt below.
    if (auto a = parse_idx(std::move(*raw), rank, cache_path); a.ok())
      return CachedIdx{std::move(*a), "from the cache"};
  }
  auto gz = read_file(path, kMaxIdxBytes);
  if (!gz.ok()) return gz.status();
  auto raw = gunzip(*gz, kMaxIdxBytes, path);
  if (!raw.ok()) return raw.status();
  const std::string why = write_cache(cache_dir, cache_path, *source, *raw);
  auto a = parse_idx(std::move(*raw), rank, path);
  if (!a.ok()) {
    std::error_code ignored;  // a cache file holds only arrays that parse
    if (why.empty()) std::filesystem::remove(cache_path, ignored);
    return a.status();
  }
  return CachedIdx{std::move(*a), why.empty() ? "decompressed" : "decompressed; not cached: " + why};
}

}  // namespace geoloco::inner
