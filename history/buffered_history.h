// A site's history when the disk may refuse a write (a full disk): a record
// that cannot be written waits in memory, in order and with the time it
// happened, and is written again on retry(). While any record waits the
// history is blocked; geolocod then keeps its trainer's work out of rounds
// (no READY counts work the history lacks) until it is unblocked. The
// writer is given, so the rules are tested without a disk.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"
#include "history/events.h"

namespace geoloco::history {

class BufferedHistory {
 public:
  using Write = std::function<Status(const Record&)>;
  explicit BufferedHistory(Write write) : write_(std::move(write)) {}

  /// What changed, for the log: the history became blocked, or writable
  /// again (`message` says so); nothing otherwise.
  struct Change {
    bool blocked = false;
    bool unblocked = false;
    std::string message;
  };

  /// Writes `event` as it happened at `now_ms` (after any record waiting).
  Change append(Event event, std::int64_t now_ms);
  /// Tries the waiting records again, oldest first.
  Change retry(std::int64_t now_ms);

  bool blocked() const { return !waiting_.empty(); }
  std::size_t waiting() const { return waiting_.size(); }

 private:
  Change flush(std::int64_t now_ms);

  Write write_;
  std::deque<Record> waiting_;
  std::optional<std::int64_t> blocked_since_ms_;
};

}  // namespace geoloco::history
