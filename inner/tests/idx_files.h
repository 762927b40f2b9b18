// IDX test files: IDX bytes of given dimensions, their gzip, and a
// temporary folder to write them in (the reader's and the cache's tests).
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::inner::testing {

using Bytes = std::vector<std::uint8_t>;

inline Bytes idx_bytes(std::vector<std::uint32_t> dims, std::uint8_t fill = 7, std::uint8_t type = 0x08) {
  Bytes b = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  std::size_t n = 1;
  for (std::uint32_t d : dims) {
    b.push_back(static_cast<std::uint8_t>(d >> 24));
    b.push_back(static_cast<std::uint8_t>(d >> 16));
    b.push_back(static_cast<std::uint8_t>(d >> 8));
    b.push_back(static_cast<std::uint8_t>(d));
    n *= d;
  }
  for (std::size_t i = 0; i < n; ++i) b.push_back(static_cast<std::uint8_t>(fill + i));
  return b;
}

inline Bytes gzip(const Bytes& raw) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&zs, raw.size()) + 64);
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline bool mentions(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

inline int next_id() {
  static int n = 0;
  return n++;
}

/// A temporary folder, removed at the end of its scope.
struct IdxDir {
  std::filesystem::path path;
  IdxDir() {
    // Appended piece by piece: GCC 12 misreads a chain of string + as an overlapping memcpy (-Wrestrict).
    std::string name = "geoloco_idx_test_";
    name.append(std::to_string(::getpid())).append("_").append(std::to_string(next_id()));
    path = std::filesystem::temp_directory_path() / name;
    std::filesystem::create_directories(path);
  }
  ~IdxDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const Bytes& bytes) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
};

}  // namespace geoloco::inner::testing
