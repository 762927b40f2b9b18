// Reader of IDX files (the MNIST family's format), gzip-compressed as the
// Debian package ships them. The bytes come from disk and are not trusted:
// every size is checked before it is used, and a truncated or corrupt file
// is refused with a message naming the file and the rule it broke.
//
// IDX: bytes 0-1 zero, byte 2 the element type (0x08 = unsigned byte, the
// only type accepted here), byte 3 the number of dimensions; then each
// dimension as a big-endian uint32; then the elements, row-major, and
// nothing after them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace geoloco::inner {

/// Largest decompressed file accepted (Fashion-MNIST's training images are 47 MB).
inline constexpr std::size_t kMaxIdxBytes = std::size_t{256} << 20;

struct IdxArray {
  std::vector<std::size_t> dims;
  std::vector<std::uint8_t> data;  ///< product(dims) bytes
};

/// Decompresses one gzip member. `name` (a path) is used in messages.
/// Errors: malformed (not gzip, corrupt stream, CRC mismatch, bytes after the
/// stream), truncated (the stream ends early), too_large (over max_output).
Result<std::vector<std::uint8_t>> gunzip(std::span<const std::uint8_t> gz, std::size_t max_output,
                                         std::string_view name);

/// Parses IDX bytes with exactly `rank` dimensions.
/// Errors: malformed (magic, rank, zero dimension, trailing bytes),
/// unsupported (an element type other than unsigned byte), truncated
/// (fewer bytes than the dimensions say), too_large.
/// Takes the bytes: the elements stay in their buffer.
Result<IdxArray> parse_idx(std::vector<std::uint8_t> bytes, std::size_t rank, std::string_view name);

/// Reads, decompresses and parses `path`. Errors: io (cannot read), and
/// those of gunzip() and parse_idx().
Result<IdxArray> read_idx_gz(const std::string& path, std::size_t rank);

/// The whole file. Errors: io naming the path, too_large over max_bytes.
Result<std::vector<std::uint8_t>> read_file(const std::string& path, std::size_t max_bytes);

}  // namespace geoloco::inner
