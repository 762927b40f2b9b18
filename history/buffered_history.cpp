#include "history/buffered_history.h"

namespace geoloco::history {

BufferedHistory::Change BufferedHistory::append(Event event, std::int64_t now_ms) {
  waiting_.push_back(Record{now_ms, std::move(event)});
  return flush(now_ms);
}

BufferedHistory::Change BufferedHistory::retry(std::int64_t now_ms) { return flush(now_ms); }

BufferedHistory::Change BufferedHistory::flush(std::int64_t now_ms) {
  Change change;
  std::size_t written = 0;
  while (!waiting_.empty()) {
    const Status s = write_(waiting_.front());
    if (!s.ok()) {
      if (!blocked_since_ms_) {
        blocked_since_ms_ = now_ms;
        change.blocked = true;
        change.message = cat("the history cannot be written (", s.message(),
                             "): its records wait in memory, and this site's trainer work is kept out of rounds "
                             "until they are on disk");
      }
      return change;
    }
    waiting_.pop_front();
    ++written;
  }
  if (blocked_since_ms_) {
    change.unblocked = true;
    change.message = cat("the history is written again after ", (now_ms - *blocked_since_ms_) / 1000.0, " s (", written,
                         " waiting record(s) written)");
    blocked_since_ms_.reset();
  }
  return change;
}

}  // namespace geoloco::history
