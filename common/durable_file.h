// A file written whole or not at all, and durable once written: the bytes go
// to a temp file beside it (`<path>.tmp`), which is fsync'd and renamed into
// place, and then the folder is fsync'd so the rename survives a crash too.
// A failed write (a full disk) leaves no temp file and `path` as it was.
// Checkpoints and the round log's entries are written this way.
//
// Large files bypass the page cache (O_DIRECT): the bytes are gathered into
// an aligned buffer of kDirectChunk bytes, which goes to the disk by DMA.
// Through the page cache, the kernel's copy into it cost this machine 0.25 to
// 2.5 core-seconds a GB, and left gigabytes dirty to flush at the fsync;
// direct, 0.04. A file smaller than one buffer, or a filesystem that refuses
// O_DIRECT (tmpfs), is written through the page cache as before.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>

#include "common/status.h"

namespace geoloco {

/// Appends bytes to the file being written. Errors: io.
using FileSink = std::function<Status(std::span<const std::byte> bytes)>;

/// Bytes gathered before each direct write (a multiple of every block size in use).
inline constexpr std::size_t kDirectChunk = 8u << 20;

/// How a file was written.
struct DurableWrite {
  std::uint64_t bytes = 0;         ///< the file's size
  std::uint64_t direct_bytes = 0;  ///< of those, written past the page cache
};

/// Calls `fill(sink)` to write `path`'s new content, then makes it durable
/// and puts it in place. Errors: io naming the file and the call that failed
/// (create, write, fsync, rename), or fill's own. `how`, when given, says
/// how it was written.
Status write_file_durably(const std::filesystem::path& path, const std::function<Status(const FileSink&)>& fill,
                          DurableWrite* how = nullptr);

}  // namespace geoloco
