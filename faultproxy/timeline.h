// The faults in force on each link at each moment: the links' faults from
// the proxy's file, then the schedule's changes and the control API's, in
// the order of their times. Pure (times are seconds since the proxy
// started), so the schedule's meaning is tested with a fixed clock; the
// proxy asks it what to do and when to look again.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "faultproxy/faults.h"

namespace geoloco::faultproxy {

/// A change taking effect at `at_s` on `link` ("*": every link).
struct TimedChange {
  double at_s = 0;
  std::string link;
  FaultChange change;
};

class Timeline {
 public:
  /// `base`: each link's faults from the file (a link not in it is unknown).
  /// `schedule`: in any order; changes of equal times apply in the order given.
  Timeline(std::map<std::string, LinkFaults> base, std::vector<TimedChange> schedule);

  /// Whether `link` is one of the proxy's links (or "*").
  bool known(const std::string& link) const;
  /// Adds a change (the control API's, at the present moment).
  void add(TimedChange change);

  /// The faults of `link` at `t`.
  LinkFaults state(const std::string& link, double t) const;
  /// Whether `link` refuses new connections at `t` (`refuse`, or a flap's down window).
  bool refusing(const std::string& link, double t) const;
  /// How many times `link`'s connections are reset in (t0, t1]: changes
  /// with `reset`, and the starts of a flap's down windows.
  int resets_between(const std::string& link, double t0, double t1) const;
  /// The first moment after `t` at which any link's faults change or a
  /// reset is due; infinity when nothing is left to happen.
  double next_event_after(double t) const;
  /// The changes that took effect in (t0, t1], in order (for the log).
  std::vector<const TimedChange*> changes_between(double t0, double t1) const;

  std::vector<std::string> links() const;

 private:
  std::map<std::string, LinkFaults> base_;
  std::vector<TimedChange> changes_;  // stable-sorted by time
};

}  // namespace geoloco::faultproxy
