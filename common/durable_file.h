// A file written whole or not at all, and durable once written: the bytes go
// to a temp file beside it (`<path>.tmp`), which is fsync'd and renamed into
// place, and then the folder is fsync'd so the rename survives a crash too.
// A failed write (a full disk) leaves no temp file and `path` as it was.
// Checkpoints and the round log's entries are written this way.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>

#include "common/status.h"

namespace geoloco {

/// Appends bytes to the file being written. Errors: io.
using FileSink = std::function<Status(std::span<const std::byte> bytes)>;

/// Calls `fill(sink)` to write `path`'s new content, then makes it durable
/// and puts it in place. Errors: io naming the file and the call that failed
/// (create, write, fsync, rename), or fill's own.
Status write_file_durably(const std::filesystem::path& path, const std::function<Status(const FileSink&)>& fill);

}  // namespace geoloco
