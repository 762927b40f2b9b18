#include "diloco/quorum.h"

#include <algorithm>

namespace geoloco::diloco {

bool is_majority(const std::vector<std::string>& sites, const std::string& named,
                 const std::set<std::string>& members) {
  std::size_t n = 0;
  for (const auto& s : sites) n += members.count(s);
  return 2 * n > sites.size() || (2 * n == sites.size() && n > 0 && members.count(named) > 0);
}

std::string majority_words(const std::vector<std::string>& sites, const std::string& named) {
  const std::size_t n = sites.size();
  if (n % 2 == 0) return cat(n / 2 + 1, " of the job's ", n, " sites, or ", n / 2, " with ", named);
  return cat(n / 2 + 1, " of the job's ", n, " sites");
}

Status QuorumOptions::validate() const {
  GEOLOCO_RETURN_IF(min_sites < 1, Err::invalid_argument, "straggler.min_sites must be at least 1, got ", min_sites);
  GEOLOCO_RETURN_IF(deadline_ms.count() < 0, Err::invalid_argument, "straggler.deadline must not be negative");
  GEOLOCO_RETURN_IF(heartbeat_timeout_ms.count() <= 0, Err::invalid_argument, "the heartbeat timeout must be positive");
  return {};
}

namespace {
std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}
}  // namespace

QuorumDecision decide_quorum(Clock::time_point now, const std::map<std::string, SiteReport>& sites,
                             const QuorumOptions& o) {
  QuorumDecision d;
  std::vector<std::string> live, ready, waiting, joining;
  std::vector<Clock::time_point> ready_times;
  for (const auto& [name, s] : sites) {  // std::map: sorted by name, so every list is too
    if (now - s.last_heartbeat >= o.heartbeat_timeout_ms) {
      d.dead.push_back(name);
      continue;
    }
    live.push_back(name);
    if (s.ready_at) {
      ready.push_back(name);
      ready_times.push_back(*s.ready_at);
    } else if (s.joining) {
      joining.push_back(name);
    } else {
      waiting.push_back(name);
    }
  }
  const std::string dead_note = d.dead.empty() ? "" : cat("; no heartbeat from ", join(d.dead));
  if (!joining.empty() && static_cast<int>(ready.size()) >= o.min_sites && waiting.empty()) {
    d.kind = QuorumDecision::Kind::close;
    d.participants = ready;
    d.late = joining;
    d.reason = cat("closed: all ", ready.size(), " training sites ready; not waited for (joining): ", join(joining),
                   dead_note);
    return d;
  }
  // Below the quorum, or with others still training, a joining site is waited for as any other.
  for (const auto& j : joining) waiting.push_back(j);
  std::sort(waiting.begin(), waiting.end());

  if (static_cast<int>(live.size()) < o.min_sites) {
    d.kind = QuorumDecision::Kind::pause;
    d.reason = cat("paused: ", live.size(), " live site(s), min_sites is ", o.min_sites, dead_note);
    return d;
  }
  if (!live.empty() && waiting.empty()) {
    d.kind = QuorumDecision::Kind::close;
    d.participants = ready;
    d.reason = cat("closed: all ", ready.size(), " live sites ready", dead_note);
    return d;
  }
  if (static_cast<int>(ready.size()) < o.min_sites) {
    d.kind = QuorumDecision::Kind::wait;
    d.reason = cat("waiting: ", ready.size(), " of ", o.min_sites, " required sites ready (waiting for ", join(waiting),
                   ")", dead_note);
    // Only a message (READY) or a heartbeat lapsing can change this; wake for the latter.
    std::optional<Clock::time_point> next_lapse;
    for (const auto& name : live) {
      const auto lapse = sites.at(name).last_heartbeat + o.heartbeat_timeout_ms;
      if (!next_lapse || lapse < *next_lapse) next_lapse = lapse;
    }
    d.wake_at = next_lapse;
    return d;
  }
  // Quorum reached: the deadline runs from the min_sites-th READY.
  std::sort(ready_times.begin(), ready_times.end());
  const auto quorum_at = ready_times[static_cast<std::size_t>(o.min_sites) - 1];
  const auto closes_at = quorum_at + o.deadline_ms;
  if (now >= closes_at) {
    d.kind = QuorumDecision::Kind::close;
    d.participants = ready;
    d.late = waiting;
    d.reason = cat("closed at the deadline: ", ready.size(), " ready, late: ", join(waiting), dead_note);
    return d;
  }
  d.kind = QuorumDecision::Kind::wait;
  d.wake_at = closes_at;
  d.reason =
      cat("quorum of ", o.min_sites, " reached; waiting up to ",
          std::chrono::duration_cast<Millis>(closes_at - now).count(), " ms more for ", join(waiting), dead_note);
  return d;
}

}  // namespace geoloco::diloco
