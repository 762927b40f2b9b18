// A cache of decompressed IDX files. Decompressing Fashion-MNIST's 26 MB
// of gzip takes the built-in trainer about 0.2-0.3 s at every start, which
// is most of the time a restarted site's trainer needs before it trains;
// reading the decompressed bytes back takes about a tenth of that.
//
// One file per source in the cache folder, named after the source's file
// name and a digest of its path: a header (magic, the source's size and
// modification time, the data's size and xxh3-64 digest), then the
// decompressed IDX bytes. A cache file is used only when all of those
// match; otherwise (another source, a torn or corrupted file) the source is
// decompressed again and the cache file replaced (written to a temporary
// name, then renamed). The cache is an optimisation only: a cache folder
// that cannot be written, or whose disk it would take near full (less than
// its own size again or a tenth of the disk left), costs the decompression,
// never the load.
#pragma once

#include <cstdint>
#include <string>

#include "inner/data/idx.h"

namespace geoloco::inner {

/// Where the IDX array came from (for the trainer's start-up line).
struct CachedIdx {
  IdxArray array;
  /// "from the cache", "decompressed" (and cached), or
  /// "decompressed; not cached: <why>".
  std::string source;
};

/// read_idx_gz(path, rank) through the cache in `cache_dir` (empty: no
/// cache, the same as read_idx_gz). Errors: those of read_idx_gz(); a cache
/// file is never an error.
Result<CachedIdx> read_idx_gz_cached(const std::string& path, std::size_t rank, const std::string& cache_dir);

/// Why a cache of `bytes` is not written on a disk with `free` of `total`
/// bytes free, or empty. A cache never takes a disk near full (the folder may
/// be the daemon's data folder, whose journal and checkpoints need the room
/// more): after it, at least as much again and a tenth of the disk stay free.
std::string cache_room_refusal(std::uint64_t free, std::uint64_t total, std::uint64_t bytes);

/// The cache file that read_idx_gz_cached uses for `path` in `cache_dir`.
std::string idx_cache_path(const std::string& path, const std::string& cache_dir);

}  // namespace geoloco::inner
