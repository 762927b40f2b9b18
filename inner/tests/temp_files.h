// Test helpers for files: a temporary folder removed at the end of its
// scope, the lines of a file, and a field of an eval log line.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
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

}  // namespace geoloco::inner::testing
