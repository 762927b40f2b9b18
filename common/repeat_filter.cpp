#include "common/repeat_filter.h"

#include "common/status.h"

namespace geoloco {

std::string RepeatFilter::counted(const std::string& line, const Seen& seen, Clock::time_point now) {
  const auto s = std::chrono::duration_cast<std::chrono::milliseconds>(now - seen.logged_at).count() / 1000.0;
  return cat(line, " (and ", seen.repeats, " more time", seen.repeats == 1 ? "" : "s", " in ", s, " s)");
}

std::vector<std::string> RepeatFilter::admit(const std::string& line, Clock::time_point now) {
  std::vector<std::string> out = flush(now);
  auto it = seen_.find(line);
  if (it != seen_.end() && now - it->second.logged_at < window_) {
    ++it->second.repeats;
    return out;
  }
  seen_[line] = Seen{now, 0};
  out.push_back(line);
  return out;
}

std::vector<std::string> RepeatFilter::flush(Clock::time_point now) {
  std::vector<std::string> out;
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (now - it->second.logged_at < window_) {
      ++it;
      continue;
    }
    if (it->second.repeats > 0) out.push_back(counted(it->first, it->second, now));
    it = seen_.erase(it);
  }
  return out;
}

std::vector<std::string> RepeatFilter::drain(Clock::time_point now) {
  std::vector<std::string> out;
  for (const auto& [line, seen] : seen_)
    if (seen.repeats > 0) out.push_back(counted(line, seen, now));
  seen_.clear();
  return out;
}

}  // namespace geoloco
