#include "history/check.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/overload.h"

namespace geoloco::history {

namespace {

struct Phase {
  std::string site;
  std::size_t incarnation = 0;
  std::uint64_t round = 0;
  std::uint32_t fragment = 0;
  std::uint64_t tokens = 0;
  bool counted = false;
};

// A 'dropped' event, and how many phases were read when it came: it can
// only drop a phase its site had reported before it.
struct DropSeen {
  Dropped drop;
  std::size_t phases_before = 0;
};

// One incarnation of a site: from a `started` to the next (or the end).
struct Incarnation {
  std::optional<Ended> end;
};

struct Claim {
  std::string digest;
  std::string who;
};

class Checker {
 public:
  explicit Checker(const CheckInput& in) : in_(in) {}

  CheckResult run() {
    CheckResult r;
    for (const auto& j : in_.journal)
      if (claim(j.round, j.digest, "the coordinator's journal") && j.final) final_round(j.round);
    for (const auto& site : in_.sites) {
      if (!violation_.empty()) break;
      read_site(site);
    }
    if (violation_.empty()) check_end();
    if (violation_.empty()) check_ledger();
    s_.sites = in_.sites.size();
    s_.rounds = final_ ? *final_ : 0;
    s_.longest_without_commit_ms = longest_gap();
    r.violation = violation_;
    r.summary = s_;
    return r;
  }

 private:
  void fail(const std::string& what) {
    if (violation_.empty()) violation_ = what;
  }

  // Rule 1: one digest per round. Returns false after a violation.
  bool claim(std::uint64_t round, const std::string& digest, const std::string& who) {
    ++s_.digests_compared;
    auto [it, fresh] = digests_.try_emplace(round, Claim{digest, who});
    if (!fresh && it->second.digest != digest) {
      fail(cat("round ", round, " has two digests: ", it->second.who, " says ", it->second.digest, ", ", who, " says ",
               digest));
      return false;
    }
    return true;
  }

  void final_round(std::uint64_t round) {
    if (final_ && *final_ != round) fail(cat("two rounds are the job's last: ", *final_, " and ", round));
    final_ = round;
  }

  void read_site(const SiteHistory& h) {
    if (h.torn_tail) ++s_.torn_tails;
    if (h.records.empty() || !std::holds_alternative<Started>(h.records.front().event))
      return fail(cat(h.source, ": a history begins with a 'started' event"));
    const std::string site = std::get<Started>(h.records.front().event).site;
    if (site.empty() || incarnations_.count(site)) return fail(cat(h.source, ": site '", site, "' given twice"));
    auto& lives = incarnations_[site];
    std::optional<std::uint64_t> held;
    std::optional<std::uint64_t> unverified;  // a start from a round beyond any held
    std::uint64_t highest = 0;
    for (const auto& rec : h.records) {
      if (!violation_.empty()) return;
      first_t_ = first_t_ ? std::min(*first_t_, rec.t_ms) : rec.t_ms;
      const std::string who = cat(site, " (", event_name(rec.event), ")");
      std::visit(Overload{
                     [&](const Started& e) {
                       if (e.site != site)
                         return fail(cat(h.source, ": a 'started' of ", e.site, " in the history of ", site));
                       if (!lives.empty()) ++s_.restarts;
                       // A checkpoint of a round this site never held (damaged, or
                       // from elsewhere) may be loaded, but nothing may be built on
                       // it: the site must take the committed state from a peer.
                       // Rounds rebuilt on it from the site's round log are claimed
                       // with their digests, as a commit would claim them.
                       const std::uint64_t base = e.rebuilt.empty() ? e.round : e.rebuilt.front().round - 1;
                       unverified =
                           !lives.empty() && base > highest ? std::optional<std::uint64_t>(e.round) : std::nullopt;
                       if (unverified) {
                         ++s_.checkpoints_ahead;
                       } else {
                         for (const auto& r : e.rebuilt) {
                           if (!claim(r.round, r.digest, cat(who, " rebuilt from its round log"))) return;
                           held_without_commit_.insert(r.round);
                         }
                         highest = std::max(highest, e.round);
                       }
                       lives.emplace_back();
                       // Not claimed as the round's digest: the site may refuse the
                       // checkpoint it loaded (its next commit or state sync is checked).
                       held = e.round;
                     },
                     [&](const TrainerTokens& e) {
                       phases_.push_back({site, lives.size() - 1, e.round, e.fragment, e.tokens, false});
                       s_.tokens_reported += e.tokens;
                     },
                     [&](const Committed& e) {
                       if (unverified)
                         return fail(cat(site, " applied round ", e.round, " on top of round ", *unverified,
                                         " from its checkpoint, a round it never held and took from no peer"));
                       if (held && e.round <= *held)
                         return fail(cat(site, " applied round ", e.round, " twice (it held round ", *held, ")"));
                       if (!held || e.round != *held + 1)
                         return fail(cat(site, " applied round ", e.round, " while holding round ",
                                         held ? cat(*held) : std::string("none"),
                                         ": no state taken from a peer covers the rounds between"));
                       if (!claim(e.round, e.digest, who)) return;
                       // This site's own work in the round was reported before it applied it.
                       applied_after_.try_emplace({site, e.round}, phases_.size());
                       auto [it, fresh] = rounds_.try_emplace(e.round, RoundSeen{e, site, rec.t_ms});
                       if (!fresh) {
                         const Committed& first = it->second.committed;
                         if (first.attempt != e.attempt || first.participants != e.participants ||
                             first.contributions != e.contributions)
                           return fail(cat("round ", e.round, ": ", it->second.site, " committed attempt ",
                                           first.attempt, " of ", names(first.participants), ", ", site, " attempt ",
                                           e.attempt, " of ", names(e.participants)));
                         it->second.t_ms = std::min(it->second.t_ms, rec.t_ms);
                       }
                       if (e.final) final_round(e.round);
                       held = e.round;
                       highest = std::max(highest, e.round);
                     },
                     [&](const StateSyncApplied& e) {
                       ++s_.state_syncs;
                       if (!claim(e.round, e.digest, cat(who, " from ", e.from))) return;
                       held_without_commit_.insert(e.round);
                       held = e.round;
                       unverified.reset();
                       highest = std::max(highest, e.round);
                     },
                     [&](const Dropped& e) {
                       drops_.push_back({e, phases_.size()});
                       ++s_.drops;
                     },
                     [&](const Aborted&) { ++s_.aborts; },
                     [&](const Ended& e) {
                       // A state never verified (a checkpoint ahead of the history,
                       // not yet replaced by a peer's) claims no digest.
                       if (!unverified && e.round > 0 && !e.digest.empty() && !claim(e.round, e.digest, who)) return;
                       lives.back().end = e;
                     },
                 },
                 rec.event);
    }
  }

  // Rule 3: the job ended, and everyone who should be there is, on its last round.
  void check_end() {
    if (!final_) {
      std::uint64_t top = rounds_.empty() ? 0 : rounds_.rbegin()->first;
      return fail(
          cat("the job did not reach its stop condition: no round was committed as its last (the highest "
              "committed is ",
              top, ")"));
    }
    for (const auto& site : in_.job_sites)
      if (!incarnations_.count(site))
        return fail(cat("no history of ", site,
                        ", a site of the job, was given: every site's folder is needed, a "
                        "site that is down too"));
    for (const auto& [site, lives] : incarnations_) {
      if (in_.allowed_down.count(site)) continue;
      const auto& end = lives.back().end;
      if (!end) return fail(cat(site, " did not end: its last run was killed or still runs (name it with --down)"));
      if (end->state != "finished" || end->round != *final_)
        return fail(cat(site, " ended ", end->state, " at round ", end->round, "; the job's last round is ", *final_,
                        end->reason.empty() ? std::string() : cat(" (", end->reason, ")")));
    }
  }

  // Marks the newest uncounted phase of `site` for `round` (and `fragment`,
  // when given) with `tokens`, among the first `before` phases read: those
  // its site had reported when the round was applied there, or the drop
  // recorded (phases are read site by site, each in its history's order).
  bool count_phase(const std::string& site, std::uint64_t round, std::optional<std::uint32_t> fragment,
                   std::uint64_t tokens, std::size_t before) {
    for (std::size_t i = std::min(before, phases_.size()); i-- > 0;) {
      Phase& p = phases_[i];
      if (!p.counted && p.site == site && p.round == round && (!fragment || p.fragment == *fragment) &&
          p.tokens == tokens) {
        p.counted = true;
        return true;
      }
    }
    return false;
  }

  // Rule 4: every reported phase counted once, or lost with a site's memory.
  void check_ledger() {
    for (const auto& j : in_.journal) {
      if (rounds_.count(j.round)) continue;
      // A coordinator that journaled the round and went down before any
      // site recorded it as applied: the sites took it from their round log
      // or from a peer, and no history names whose work it counted (those
      // phases stay with the killed runs' memory). Held, its digest checked.
      if (held_without_commit_.count(j.round)) {
        if (unrecorded_.insert(j.round).second) {
          ++s_.rounds_unrecorded;
          s_.tokens_unrecorded += j.tokens;
        }
        continue;
      }
      return fail(cat("round ", j.round, " is committed in the coordinator's journal, but no site given holds it: ",
                      "the work it counted cannot be checked (is a site's history missing?)"));
    }
    for (const auto& [round, seen] : rounds_)
      for (const auto& c : seen.committed.contributions) {
        if (!incarnations_.count(c.site))
          return fail(cat("round ", round, " counts work of ", c.site, ", whose history was not given"));
        // Where the contributing site applied the round itself, its phase came before.
        auto bound = applied_after_.find({c.site, round});
        const std::size_t before = bound == applied_after_.end() ? phases_.size() : bound->second;
        if (!count_phase(c.site, c.anchor_round, seen.committed.fragment, c.tokens, before))
          return fail(cat("round ", round, " counts ", c.tokens, " tokens of ", c.site, " trained for round ",
                          c.anchor_round, " (fragment ", seen.committed.fragment, "), which its trainer never reported",
                          bound == applied_after_.end() ? std::string() : cat(" before ", c.site, " applied the round"),
                          " (or another round counts them too)"));
        s_.tokens_committed += c.tokens;
      }
    for (const auto& [d, before] : drops_) {
      if (!count_phase(d.site, d.round, std::nullopt, d.tokens, before))
        return fail(cat(d.site, " dropped ", d.tokens, " tokens trained for round ", d.round,
                        ", which its trainer never reported (or are counted elsewhere too)"));
      s_.tokens_dropped += d.tokens;
    }
    for (const auto& p : phases_) {
      if (p.counted) continue;
      const auto& life = incarnations_.at(p.site)[p.incarnation];
      if (!life.end || life.end->state != "finished") {
        s_.tokens_in_memory += p.tokens;
        continue;
      }
      return fail(cat(p.site, "'s trainer reported ", p.tokens, " tokens for round ", p.round,
                      " that no committed round counts and no 'dropped' event names: lost silently"));
    }
  }

  std::int64_t longest_gap() const {
    if (!first_t_) return 0;
    std::vector<std::int64_t> times;
    for (const auto& [round, seen] : rounds_) times.push_back(seen.t_ms);
    std::sort(times.begin(), times.end());
    std::int64_t longest = 0, last = *first_t_;
    for (auto t : times) {
      longest = std::max(longest, t - last);
      last = t;
    }
    return longest;
  }

  static std::string names(const std::vector<std::string>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
    return out + "]";
  }

  struct RoundSeen {
    Committed committed;
    std::string site;
    std::int64_t t_ms = 0;
  };

  const CheckInput& in_;
  std::string violation_;
  CheckSummary s_;
  std::map<std::uint64_t, Claim> digests_;
  std::map<std::uint64_t, RoundSeen> rounds_;
  std::set<std::uint64_t> held_without_commit_;  ///< rounds a site rebuilt from its round log or took from a peer
  std::set<std::uint64_t> unrecorded_;           ///< journal rounds no site's history records as applied
  std::map<std::string, std::vector<Incarnation>> incarnations_;
  std::vector<Phase> phases_;
  std::vector<DropSeen> drops_;
  std::map<std::pair<std::string, std::uint64_t>, std::size_t> applied_after_;  // (site, round) -> phases read before
  std::optional<std::uint64_t> final_;
  std::optional<std::int64_t> first_t_;
};

}  // namespace

CheckResult check_history(const CheckInput& input) { return Checker(input).run(); }

std::string summary_text(const CheckSummary& s) {
  std::ostringstream o;
  o << "sites: " << s.sites << "\n"
    << "rounds: " << s.rounds << "\n"
    << "digests compared: " << s.digests_compared << "\n"
    << "restarts: " << s.restarts << ", aborts seen: " << s.aborts << ", states taken from a peer: " << s.state_syncs
    << ", histories cut by a kill: " << s.torn_tails << ", checkpoints ahead of the history: " << s.checkpoints_ahead
    << "\n"
    << "tokens: " << s.tokens_reported << " reported, " << s.tokens_committed << " committed, " << s.tokens_dropped
    << " dropped (" << s.drops << " drops), " << s.tokens_in_memory << " lost with a killed or stopped site's memory\n";
  if (s.rounds_unrecorded > 0)
    o << "rounds committed with no site's record of their work: " << s.rounds_unrecorded << " (" << s.tokens_unrecorded
      << " tokens, by the journal; every site took them from its round log or a peer)\n";
  o << "longest without a commit: " << s.longest_without_commit_ms / 1000.0 << " s\n";
  return o.str();
}

}  // namespace geoloco::history
