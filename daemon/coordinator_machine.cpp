#include "daemon/coordinator_machine.h"

#include <algorithm>
#include <set>

namespace geoloco::daemon {

CoordinatorMachine::CoordinatorMachine(CoordinatorOptions options, std::uint64_t round, Clock::time_point now)
    : options_(std::move(options)),
      round_(round),
      attempt_(std::max(options_.first_attempt, first_attempt_of(options_.epoch))),
      tokens_(options_.tokens_so_far) {
  for (const auto& s : options_.sites) {
    const bool live = options_.live_at_start.empty() || options_.live_at_start.count(s);
    heard_[s] = live ? now : now - options_.quorum.heartbeat_timeout_ms;
    if (!live) restarted_.insert(s);  // back, it trains from a later start than the others (on_lost)
  }
  if (round_ > 1) joining_ = restarted_;
}

std::string CoordinatorMachine::phase_of(const std::string& site) const {
  auto it = phase_of_.find(site);
  return it == phase_of_.end() ? std::string() : it->second;
}

void CoordinatorMachine::start_collecting(std::uint64_t round) {
  attempt_ = round == round_ ? attempt_ + 1 : first_attempt_of(options_.epoch);
  failure_.reset();
  failed_.reset();
  round_ = round;
  phase_ = Phase::collecting;
  ready_.clear();
  ready_at_.clear();
  // A site back from closed connections whose trainer trains as this round
  // begins starts its phase with the others; one whose trainer does not yet
  // cannot have, and its READY would hold every other site.
  std::erase_if(restarted_, [this](const std::string& site) {
    const std::string phase = phase_of(site);
    return phase == "inner" || phase == "ready" || phase == "exchange";
  });
  if (round > 1) joining_ = restarted_;
  else joining_.clear();
  participants_.clear();
  late_.clear();
  commits_.clear();
  acks_.clear();
}

void CoordinatorMachine::collect_again(Clock::time_point now) {
  ++aborts_in_row_;
  Millis pause = kReplanPause;
  for (std::uint32_t k = 1; k < aborts_in_row_ && pause < kReplanPauseMax; ++k) pause *= 2;
  replan_at_ = now + std::min(pause, kReplanPauseMax);
  start_collecting(round_);
}

Status CoordinatorMachine::on_heartbeat(const std::string& site, Clock::time_point now, const std::string& phase) {
  auto it = heard_.find(site);
  GEOLOCO_RETURN_IF(it == heard_.end(), Err::invalid_argument, "heartbeat from '", site, "', not a site of this job");
  it->second = now;
  if (!phase.empty()) phase_of_[site] = phase;
  return {};
}

Status CoordinatorMachine::on_lost(const std::string& site, Clock::time_point now) {
  auto it = heard_.find(site);
  GEOLOCO_RETURN_IF(it == heard_.end(), Err::invalid_argument, "lost connection to '", site,
                    "', not a site of this job");
  it->second = std::min(it->second, now - options_.quorum.heartbeat_timeout_ms);
  phase_of_[site] = "idle";  // back, it catches up and starts a trainer before it trains
  restarted_.insert(site);
  if (round_ > 1) joining_.insert(site);
  ready_.erase(site);
  ready_at_.erase(site);
  if (phase_ == Phase::planned && !failure_ && !commits_.count(site) &&
      std::find(participants_.begin(), participants_.end(), site) != participants_.end())
    failure_ = cat("participant ", site, "'s connections closed during the exchange");
  return {};
}

Status CoordinatorMachine::on_ready(const std::string& site, const ReadyMessage& r, Clock::time_point now) {
  GEOLOCO_RETURN_IF(!heard_.count(site), Err::invalid_argument, "READY from '", site, "', not a site of this job");
  heard_[site] = now;
  // A READY is work from a trainer that trains: the "idle" of a heartbeat
  // sent before it (heartbeats come once a second, rounds may be faster) is over.
  phase_of_[site] = "inner";
  restarted_.erase(site);  // its trainer trains: the next rounds wait for it as for any other
  GEOLOCO_RETURN_IF(phase_ != Phase::collecting || r.round != round_, Err::mismatch, "READY of round ", r.round,
                    " from ", site, ", but round ", round_, " is ",
                    phase_ == Phase::collecting ? "collecting" : "being exchanged");
  GEOLOCO_RETURN_IF(r.anchor_round > round_ || r.anchor_round == 0, Err::invalid_argument, "READY from ", site,
                    " trained from anchor ", r.anchor_round, ", which round ", round_, " cannot use");
  if (ready_.empty() && round_ > 1) {
    // The round's first READY: a site whose state is in place but whose
    // trainer is not training cannot be READY before a whole inner phase
    // more. (A site still fetching the state is waited for, up to the
    // deadline, as before: the pause gives a slow link the time to catch up
    // rather than fall further behind rounds that no longer wait.)
    for (const auto& [other, phase] : phase_of_)
      if (phase == "idle" && other != site) joining_.insert(other);
  }
  ready_[site] = r;
  // A repeated READY (sites resend it until a PLAN comes) keeps the time of
  // the first: the deadline runs from when the site was really ready.
  ready_at_.emplace(site, now);
  return {};
}

Status CoordinatorMachine::on_commit(const std::string& site, const CommitMessage& c) {
  GEOLOCO_RETURN_IF(phase_ != Phase::planned || c.round != round_, Err::mismatch, "COMMIT of round ", c.round, " from ",
                    site, ", but round ", round_, " is not being exchanged");
  GEOLOCO_RETURN_IF(c.attempt != attempt_, Err::mismatch, "COMMIT of round ", c.round, " attempt ", c.attempt, " from ",
                    site, ", but attempt ", attempt_, " is being exchanged");
  if (std::find(late_.begin(), late_.end(), site) != late_.end()) {
    acks_[site] = c.anchor_digest;
    return {};
  }
  GEOLOCO_RETURN_IF(std::find(participants_.begin(), participants_.end(), site) == participants_.end(),
                    Err::invalid_argument, "COMMIT from ", site, ", which takes no part in round ", round_);
  commits_[site] = c.anchor_digest;
  return {};
}

Status CoordinatorMachine::on_failed(const std::string& site, const FailedMessage& f) {
  GEOLOCO_RETURN_IF(phase_ != Phase::planned || f.round != round_ || f.attempt != attempt_, Err::mismatch,
                    "failure report of round ", f.round, " attempt ", f.attempt, " from ", site, ", but round ", round_,
                    " attempt ", attempt_, " is not being exchanged");
  GEOLOCO_RETURN_IF(std::find(participants_.begin(), participants_.end(), site) == participants_.end(),
                    Err::invalid_argument, "failure report from ", site, ", which is not a participant of round ",
                    round_);
  if (!failure_) failure_ = cat(site, " could not finish the exchange: ", f.reason);
  if (f.own && !failed_) failed_ = site;  // a peer's failure reported by a site is not the reporter's
  return {};
}

std::map<std::string, diloco::SiteReport> CoordinatorMachine::reports(Clock::time_point now) const {
  std::map<std::string, diloco::SiteReport> out;
  for (const auto& [site, at] : heard_) {
    diloco::SiteReport r;
    r.last_heartbeat = at;
    auto out_until = sits_out_until_.find(site);
    const bool sits_out = out_until != sits_out_until_.end() && now < out_until->second;
    if (auto it = ready_at_.find(site); it != ready_at_.end() && !sits_out) r.ready_at = it->second;
    if (auto it = ready_.find(site); it != ready_.end()) r.tokens = it->second.tokens;
    // Joining: idle at the round's first READY or back from closed connections, while its
    // state is in place and its trainer has no READY yet (one still fetching the state, or
    // holding a READY it cannot send before it catches up, is waited for up to the
    // deadline); or idle now (its state came in meanwhile).
    const std::string phase = phase_of(site);
    r.joining = (joining_.count(site) > 0 && (phase == "idle" || phase == "inner")) ||
                (round_ > 1 && !ready_.empty() && phase == "idle");
    out[site] = r;
  }
  return out;
}

CoordinatorMachine::Actions CoordinatorMachine::step(Clock::time_point now) {
  Actions a;
  if (phase_ == Phase::finished) return a;

  if (phase_ == Phase::planned) {
    if (failure_) {
      a.abort = AbortMessage{round_, attempt_, *failure_, options_.epoch};
      a.notes.push_back(cat("round ", round_, " aborted: ", *failure_));
      if (failed_) {
        sits_out_until_[*failed_] = now + options_.quorum.heartbeat_timeout_ms;
        a.notes.push_back(cat(*failed_, " sits out the rounds planned in the next ",
                              options_.quorum.heartbeat_timeout_ms.count() / 1000.0,
                              " s (its READY does not count; it observes them and its work is late)"));
      }
      collect_again(now);
      return a;
    }
    // A participant that went silent cannot finish the exchange.
    for (const auto& p : participants_) {
      if (now - heard_.at(p) >= options_.quorum.heartbeat_timeout_ms && !commits_.count(p)) {
        a.abort =
            AbortMessage{round_, attempt_, cat("participant ", p, " stopped sending heartbeats during the exchange"),
                         options_.epoch};
        a.notes.push_back(cat("round ", round_, " aborted: ", a.abort->reason));
        collect_again(now);
        return a;
      }
    }
    if (commits_.size() < participants_.size()) {
      std::optional<Clock::time_point> lapse;
      for (const auto& p : participants_)
        if (!commits_.count(p)) {
          const auto t = heard_.at(p) + options_.quorum.heartbeat_timeout_ms;
          if (!lapse || t < *lapse) lapse = t;
        }
      a.wake_at = lapse;
      return a;
    }
    const std::string digest = commits_.begin()->second;
    for (const auto& [site, d] : commits_) {
      if (d != digest) {
        a.abort = AbortMessage{round_, attempt_,
                               cat("anchor digests differ after round ", round_, ": ", commits_.begin()->first, " has ",
                                   digest, ", ", site, " has ", d),
                               options_.epoch};
        a.notes.push_back(a.abort->reason);
        collect_again(now);
        return a;
      }
    }
    // A majority must hold the outcome: the participants, the observers
    // that computed the same anchor, and this coordinator.
    std::set<std::string> holders(participants_.begin(), participants_.end());
    for (const auto& [site, d] : acks_)
      if (d == digest) holders.insert(site);
    if (!options_.self.empty()) holders.insert(options_.self);
    if (!diloco::is_majority(options_.sites, options_.named, holders)) {
      std::optional<Clock::time_point> lapse;  // an observer still heard may yet answer
      for (const auto& s : late_)
        if (!acks_.count(s) && now - heard_.at(s) < options_.quorum.heartbeat_timeout_ms) {
          const auto t = heard_.at(s) + options_.quorum.heartbeat_timeout_ms;
          if (!lapse || t < *lapse) lapse = t;
        }
      if (lapse) {
        a.wake_at = lapse;
        return a;
      }
      std::string names;
      for (const auto& h : holders) names += (names.empty() ? "" : ", ") + h;
      a.abort = AbortMessage{round_, attempt_,
                             cat("only ", holders.size(), " site(s) hold round ", round_, "'s outcome (", names,
                                 "); a commit needs ", diloco::majority_words(options_.sites, options_.named)),
                             options_.epoch};
      a.notes.push_back(cat("round ", round_, " aborted: ", a.abort->reason));
      collect_again(now);
      return a;
    }
    a.committed = CommittedMessage{round_, digest, false, attempt_, options_.epoch};
    tokens_ += plan_tokens_;
    a.committed->tokens = tokens_;
    a.notes.push_back(cat("round ", round_, " committed by ", participants_.size(), " site(s), anchor ", digest));
    const bool rounds_done = options_.stop_after_round != 0 && round_ >= options_.stop_after_round;
    const bool tokens_done = options_.stop_after_tokens != 0 && tokens_ >= options_.stop_after_tokens;
    if (rounds_done || tokens_done) {
      phase_ = Phase::finished;
      a.committed->final = true;
      a.notes.push_back(cat("job finished after round ", round_, " (", tokens_, " tokens)"));
      return a;
    }
    aborts_in_row_ = 0;
    replan_at_.reset();
    start_collecting(round_ + 1);
    return a;
  }

  if (replan_at_ && now < *replan_at_) {
    a.wake_at = replan_at_;  // the pause after an abort
    return a;
  }

  // Collecting. Without a majority live no round could commit: pause.
  std::set<std::string> live;
  if (!options_.self.empty()) live.insert(options_.self);
  for (const auto& [site, at] : heard_)
    if (now - at < options_.quorum.heartbeat_timeout_ms) live.insert(site);
  if (!diloco::is_majority(options_.sites, options_.named, live)) {
    std::string names;
    for (const auto& l : live) names += (names.empty() ? "" : ", ") + l;
    a.notes.push_back(cat("paused: only ", live.size(), " of the job's ", options_.sites.size(), " sites are live (",
                          names, "); a round commits only with ",
                          diloco::majority_words(options_.sites, options_.named)));
    std::optional<Clock::time_point> lapse;
    for (const auto& [site, at] : heard_)
      if (live.count(site) && site != options_.self) {
        const auto t = at + options_.quorum.heartbeat_timeout_ms;
        if (!lapse || t < *lapse) lapse = t;
      }
    a.wake_at = lapse;
    return a;
  }
  if (epoch_of_attempt(attempt_) != options_.epoch) {
    a.notes.push_back(cat("paused: round ", round_, " was planned ", kAttemptsPerEpoch, " times in epoch ",
                          options_.epoch, " without committing; every exchange of it failed (see the aborts above)"));
    return a;
  }
  // The quorum rule decides when, the straggler rule with what weights.
  auto decision = diloco::decide_quorum(now, reports(now), options_.quorum);
  for (const auto& d : decision.dead) a.notes.push_back(cat("site ", d, " is silent (no heartbeat)"));
  if (decision.kind != diloco::QuorumDecision::Kind::close) {
    a.wake_at = decision.wake_at;
    if (decision.kind == diloco::QuorumDecision::Kind::pause) a.notes.push_back(decision.reason);
    return a;
  }
  std::vector<diloco::Contribution> contributions;
  std::vector<diloco::ReportedWork> work(options_.sites.size());
  for (const auto& site : decision.participants) {
    const auto& r = ready_.at(site);
    const auto index = static_cast<std::uint32_t>(std::find(options_.sites.begin(), options_.sites.end(), site) -
                                                  options_.sites.begin());
    work[index] = {r.tokens, r.loss};
    contributions.push_back({index, r.anchor_round, r.inner_steps, r.tokens});
  }
  auto weights = diloco::decide_round(contributions, round_, options_.weighting, options_.straggler);
  if (!weights.ok()) {
    a.notes.push_back(cat("round ", round_, " cannot close: ", weights.status().message()));
    a.wake_at = now + options_.quorum.deadline_ms;
    return a;
  }
  for (const auto& d : *weights) a.notes.push_back(d.reason);
  const auto ordered = diloco::order_plan(*weights, options_.sites, work);
  PlanMessage plan;
  plan.round = round_;
  plan.attempt = attempt_;
  plan.epoch = options_.epoch;
  // A site fetching the state would decline to observe: named late, it would
  // only be sent the round's average over its links, beside the state it needs.
  for (const auto& l : decision.late)
    if (phase_of(l) != "catching_up") plan.late.push_back(l);
  for (auto i : ordered.left_out) plan.late.push_back(options_.sites[i]);
  for (auto i : ordered.participants) {
    plan.participants.push_back(options_.sites[i]);
    plan.tokens_each.push_back(work[i].tokens);
    plan.anchor_rounds.push_back(ready_.at(options_.sites[i]).anchor_round);
  }
  plan.weights = ordered.weights;
  plan.tokens = ordered.tokens;
  plan.loss = ordered.loss;
  plan_tokens_ = plan.tokens;
  std::sort(plan.late.begin(), plan.late.end());
  a.notes.push_back(cat("round ", round_, ": ", decision.reason));
  participants_ = plan.participants;
  late_ = plan.late;
  commits_.clear();
  acks_.clear();
  phase_ = Phase::planned;
  a.plan = std::move(plan);
  return a;
}

}  // namespace geoloco::daemon
