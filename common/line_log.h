// An append-only file of text lines that survives a crash: each append is on
// disk (fdatasync) before it returns, and opening the file keeps its lines up
// to the first one that is torn (no newline: a crash mid-append) or that the
// caller's check refuses (damaged), truncating the rest so the next append
// starts clean. The coordinator's journal and each site's history are such
// files, with their own line formats.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace geoloco {

class LineLog {
 public:
  /// Whether a line (without its newline) is intact.
  using LineCheck = std::function<bool(std::string_view line)>;

  /// Opens (creating if missing, mode 0640) and reads the log at `path`;
  /// `what` names it in errors ("journal /x/journal: ..."). Errors: io. A
  /// torn or damaged tail is not an error: it is dropped and counted.
  static Result<LineLog> open(const std::string& path, const std::string& what, const LineCheck& check);

  LineLog(LineLog&&) noexcept;
  LineLog& operator=(LineLog&&) noexcept;
  ~LineLog();

  /// The intact lines found when the log was opened, oldest first, without newlines.
  const std::vector<std::string>& lines() const { return lines_; }
  /// Bytes dropped from the tail when the log was opened.
  std::size_t dropped_bytes() const { return dropped_bytes_; }
  const std::string& path() const { return path_; }

  /// Appends `line` (which must not contain a newline) and returns only once
  /// it is on disk. Errors: invalid_argument (a newline in it), io (a write
  /// cut short, e.g. by a full disk, is undone: the file ends at its last
  /// whole line, and a later append may succeed; a line never glues to half
  /// of another).
  Status append(std::string_view line);
  /// Appends `lines` in order with one write and one sync: all of them, or
  /// (an error) none. Errors: as append.
  Status append(std::span<const std::string> lines);

 private:
  LineLog(int fd, std::string path, std::string what) : fd_(fd), path_(std::move(path)), what_(std::move(what)) {}
  int fd_ = -1;
  std::string path_;
  std::string what_;
  std::vector<std::string> lines_;
  std::size_t dropped_bytes_ = 0;
  bool broken_ = false;  ///< a failed write could not be undone
};

/// A line that carries its own check: "<xxh3-64 of text, 16 hex> <text>"
/// (the coordinator's journal).
std::string hashed_line(std::string_view text);
/// The text of a hashed line, or nothing when the line is damaged.
std::optional<std::string_view> hashed_line_text(std::string_view line);

}  // namespace geoloco
