// Test helpers for files: a temporary folder removed at the end of its
// scope, the lines of a file, a field of an eval log line, and floats handed
// from a forked worker to the test through a file.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace geoloco::inner::testing {

struct TempDir {
  std::string path;
  /// <tmp>/<prefix>-<pid>-<n>, emptied first; created unless `create` is false.
  explicit TempDir(const std::string& prefix, bool create = true) {
    static int n = 0;
    // Appended piece by piece: GCC 12 misreads a chain of string + as an
    // overlapping memcpy (-Wrestrict) at -O2.
    std::string name = prefix;
    name.append("-").append(std::to_string(::getpid())).append("-").append(std::to_string(n++));
    path = (std::filesystem::temp_directory_path() / name).string();
    std::filesystem::remove_all(path);
    if (create) std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

/// The value after "key": in one eval log line (the format is fixed by eval_log_line).
inline std::string field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\": ";
  const auto at = line.find(k);
  if (at == std::string::npos) return "";
  const auto begin = at + k.size();
  return line.substr(begin, line.find_first_of(",}", begin) - begin);
}

/// Writes `values`' bytes to `path` (a forked worker's result); false on failure.
inline bool write_floats(const std::string& path, std::span<const float> values) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  return static_cast<bool>(f);
}

/// The floats write_floats left at `path`, removing the file; empty when
/// there is none.
inline std::vector<float> take_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return {};
  std::vector<float> v(static_cast<std::size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  std::filesystem::remove(path);
  return v;
}

}  // namespace geoloco::inner::testing
