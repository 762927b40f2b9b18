#include "inner/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace geoloco::inner {

Result<std::vector<std::uint8_t>> read_file(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  GEOLOCO_RETURN_IF(!in, Err::io, path, ": cannot open (", std::strerror(errno), ")");
  const std::streamoff size = in.tellg();
  GEOLOCO_RETURN_IF(size < 0, Err::io, path, ": cannot determine its size");
  GEOLOCO_RETURN_IF(static_cast<std::size_t>(size) > max_bytes, Err::too_large, path, ": ", size,
                    " bytes, more than the limit of ", max_bytes);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  GEOLOCO_RETURN_IF(!in, Err::io, path, ": read failed");
  return bytes;
}

Result<std::vector<std::uint8_t>> gunzip(std::span<const std::uint8_t> gz, std::size_t max_output,
                                         std::string_view name) {
  GEOLOCO_RETURN_IF(gz.size() < 2 || gz[0] != 0x1f || gz[1] != 0x8b, Err::malformed, name,
                    ": not a gzip file (the first two bytes are not 1f 8b)");
  z_stream zs{};
  // 16 + 15: accept the gzip wrapper only (zlib checks header and CRC-32).
  GEOLOCO_RETURN_IF(inflateInit2(&zs, 16 + 15) != Z_OK, Err::internal, name, ": zlib inflateInit2 failed");
  std::vector<std::uint8_t> out;
  // The gzip trailer's ISIZE (the size mod 2^32) sizes the buffer once, as
  // a hint only: the file is not trusted, so the loop below still grows it
  // when the stream is longer and stops at max_output. One buffer instead
  // of doubling: a 47 MB file was copied and page-faulted twice over.
  if (gz.size() >= 18) {
    const std::uint8_t* t = gz.data() + gz.size() - 4;
    const std::size_t isize =
        std::size_t{t[0]} | (std::size_t{t[1]} << 8) | (std::size_t{t[2]} << 16) | (std::size_t{t[3]} << 24);
    out.reserve(std::min(isize, max_output));
  }
  zs.next_in = const_cast<Bytef*>(gz.data());  // zlib's API is not const-correct; it does not write
  zs.avail_in = static_cast<uInt>(gz.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (out.size() == max_output) {
      inflateEnd(&zs);
      return GEOLOCO_ERROR(Err::too_large, name, ": decompresses to more than ", max_output, " bytes");
    }
    const std::size_t before = out.size();
    const std::size_t room = out.capacity() > before ? out.capacity() - before : 0;
    const std::size_t grow =
        std::min<std::size_t>(max_output - before, room >= (1u << 16) ? room : std::max<std::size_t>(before, 1u << 16));
    out.resize(before + grow);
    zs.next_out = out.data() + before;
    zs.avail_out = static_cast<uInt>(grow);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(before + (grow - zs.avail_out));
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      return GEOLOCO_ERROR(Err::truncated, name, ": gzip stream ends early (after ", gz.size(), " bytes)");
    }
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      const std::string why = zs.msg ? zs.msg : "zlib error";
      inflateEnd(&zs);
      return GEOLOCO_ERROR(Err::malformed, name, ": corrupt gzip data (", why, ")");
    }
  }
  const std::size_t trailing = zs.avail_in;
  inflateEnd(&zs);
  GEOLOCO_RETURN_IF(trailing != 0, Err::malformed, name, ": ", trailing, " bytes after the end of the gzip stream");
  return out;
}

Result<IdxArray> parse_idx(std::vector<std::uint8_t> bytes, std::size_t rank, std::string_view name) {
  GEOLOCO_RETURN_IF(bytes.size() < 4, Err::truncated, name, ": ", bytes.size(),
                    " bytes, shorter than the 4-byte IDX magic number");
  GEOLOCO_RETURN_IF(bytes[0] != 0 || bytes[1] != 0, Err::malformed, name,
                    ": bad IDX magic number (the first two bytes must be zero)");
  GEOLOCO_RETURN_IF(bytes[2] != 0x08, Err::unsupported, name, ": IDX element type 0x", std::hex,
                    static_cast<int>(bytes[2]), std::dec, " is not unsigned byte (0x08)");
  GEOLOCO_RETURN_IF(bytes[3] != rank, Err::malformed, name, ": IDX file has ", static_cast<int>(bytes[3]),
                    " dimensions, expected ", rank);
  const std::size_t header = 4 + 4 * rank;
  GEOLOCO_RETURN_IF(bytes.size() < header, Err::truncated, name, ": ", bytes.size(),
                    " bytes, shorter than the IDX header (", header, ")");
  IdxArray a;
  std::size_t elements = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    const std::uint8_t* p = bytes.data() + 4 + 4 * d;
    const std::size_t dim = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
    GEOLOCO_RETURN_IF(dim == 0, Err::malformed, name, ": IDX dimension ", d, " is zero");
    // Checked before multiplying: the product must stay within the byte limit.
    GEOLOCO_RETURN_IF(dim > kMaxIdxBytes / elements, Err::too_large, name, ": IDX dimensions describe more than ",
                      kMaxIdxBytes, " bytes");
    elements *= dim;
    a.dims.push_back(dim);
  }
  GEOLOCO_RETURN_IF(bytes.size() - header < elements, Err::truncated, name, ": IDX data has ", bytes.size() - header,
                    " bytes, the dimensions say ", elements);
  GEOLOCO_RETURN_IF(bytes.size() - header > elements, Err::malformed, name, ": ", bytes.size() - header - elements,
                    " bytes after the IDX data the dimensions describe");
  // In place: the header's bytes are dropped, the elements not copied to a new buffer.
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));
  a.data = std::move(bytes);
  return a;
}

Result<IdxArray> read_idx_gz(const std::string& path, std::size_t rank) {
  auto gz = read_file(path, kMaxIdxBytes);
  if (!gz.ok()) return gz.status();
  auto raw = gunzip(*gz, kMaxIdxBytes, path);
  if (!raw.ok()) return raw.status();
  return parse_idx(std::move(*raw), rank, path);
}

}  // namespace geoloco::inner
