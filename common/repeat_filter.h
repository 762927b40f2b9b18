// What keeps a log readable when a condition repeats (an attempt
// aborted for the same reason again and again, a site silent at every
// step): a line identical to one logged less than `window` ago is not
// logged again but counted, and the count is said once the window is over
// ("... (and 244 more times in 30 s)"). Lines that differ (a new round, a
// new reason) are logged as they come. Pure, with the clock given.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace geoloco {

class RepeatFilter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RepeatFilter(std::chrono::milliseconds window = std::chrono::seconds(30)) : window_(window) {}

  /// The lines to log now for `line` happening at `now`: the line itself,
  /// with the count of its repeats in the window before when there were any,
  /// or nothing when it repeats within the window.
  std::vector<std::string> admit(const std::string& line, Clock::time_point now);
  /// The counts of lines whose window is over and that repeated, each once;
  /// called from a timer so that a condition that stopped is still counted.
  std::vector<std::string> flush(Clock::time_point now);
  /// Every count not yet said, whatever its window (the job ended).
  std::vector<std::string> drain(Clock::time_point now);

 private:
  struct Seen {
    Clock::time_point logged_at;
    std::size_t repeats = 0;
  };
  static std::string counted(const std::string& line, const Seen& seen, Clock::time_point now);
  std::chrono::milliseconds window_;
  std::map<std::string, Seen> seen_;
};

}  // namespace geoloco
