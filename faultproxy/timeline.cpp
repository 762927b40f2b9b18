#include "faultproxy/timeline.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace geoloco::faultproxy {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

bool applies(const TimedChange& c, const std::string& link) { return c.link == "*" || c.link == link; }

// The first start of a flap's down window in (t0, t1], counted: the window
// starts are since + k * period, k >= 0.
int flap_starts_between(const LinkFaults& f, double t0, double t1) {
  if (f.flap_period_s <= 0 || t1 < f.flap_since_s) return 0;
  auto starts_until = [&](double t) {  // number of starts at or before t
    if (t < f.flap_since_s) return 0.0;
    return std::floor((t - f.flap_since_s) / f.flap_period_s) + 1;
  };
  return static_cast<int>(starts_until(t1) - starts_until(t0));
}

}  // namespace

Timeline::Timeline(std::map<std::string, LinkFaults> base, std::vector<TimedChange> schedule)
    : base_(std::move(base)), changes_(std::move(schedule)) {
  std::stable_sort(changes_.begin(), changes_.end(),
                   [](const TimedChange& a, const TimedChange& b) { return a.at_s < b.at_s; });
}

bool Timeline::known(const std::string& link) const { return link == "*" || base_.count(link) > 0; }

void Timeline::add(TimedChange change) {
  // After every change of the same or an earlier time: the newest wins.
  auto at = std::upper_bound(changes_.begin(), changes_.end(), change.at_s,
                             [](double t, const TimedChange& c) { return t < c.at_s; });
  changes_.insert(at, std::move(change));
}

LinkFaults Timeline::state(const std::string& link, double t) const {
  auto it = base_.find(link);
  if (it == base_.end()) return {};
  LinkFaults f = it->second;
  for (const auto& c : changes_) {
    if (c.at_s > t) break;
    if (!applies(c, link)) continue;
    if (c.change.clear) f = it->second;
    c.change.apply(f, c.at_s);
  }
  return f;
}

bool Timeline::refusing(const std::string& link, double t) const {
  const LinkFaults f = state(link, t);
  return f.refuse || f.flapping_down(t);
}

int Timeline::resets_between(const std::string& link, double t0, double t1) const {
  if (!(t1 > t0)) return 0;
  int n = 0;
  for (const auto& c : changes_) {
    if (c.at_s > t1) break;
    if (c.at_s > t0 && c.change.reset && applies(c, link)) ++n;
  }
  // The flapping in force may change inside the interval: each stretch up to
  // just before a change is counted with the faults of that stretch.
  double from = t0;
  for (const auto& c : changes_) {
    if (c.at_s <= t0) continue;
    if (c.at_s > t1) break;
    if (!applies(c, link)) continue;
    const double end = std::nextafter(c.at_s, -kNever);
    n += flap_starts_between(state(link, end), from, end);
    from = end;
  }
  n += flap_starts_between(state(link, t1), from, t1);
  return n;
}

double Timeline::next_event_after(double t) const {
  double next = kNever;
  for (const auto& c : changes_) {
    if (c.at_s > t) {
      next = c.at_s;
      break;
    }
  }
  for (const auto& [name, unused] : base_) {
    const LinkFaults f = state(name, t);
    if (f.flap_period_s <= 0) continue;
    if (t < f.flap_since_s) {
      next = std::min(next, f.flap_since_s);
      continue;
    }
    const double k = std::floor((t - f.flap_since_s) / f.flap_period_s);
    const double start = f.flap_since_s + k * f.flap_period_s;
    const double end = start + f.flap_down_s;
    next = std::min(next, end > t ? end : start + f.flap_period_s);
  }
  return next;
}

std::vector<const TimedChange*> Timeline::changes_between(double t0, double t1) const {
  std::vector<const TimedChange*> out;
  for (const auto& c : changes_) {
    if (c.at_s > t1) break;
    if (c.at_s > t0) out.push_back(&c);
  }
  return out;
}

std::vector<std::string> Timeline::links() const {
  std::vector<std::string> out;
  for (const auto& [name, unused] : base_) out.push_back(name);
  return out;
}

}  // namespace geoloco::faultproxy
