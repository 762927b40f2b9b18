#include "daemon/succession.h"

#include <algorithm>

namespace geoloco::daemon {

using namespace succession;
using diloco::is_majority;
using diloco::majority_words;

nlohmann::json office_started_record(std::uint64_t epoch) { return to_json(OfficeStartedRecord{epoch}); }

OfficeRecords office_records(const std::vector<nlohmann::json>& records) {
  // Records the journal let in read (check_journal_record); any other is skipped.
  OfficeRecords out;
  for (const auto& r : records) {
    const std::string type = r.is_object() ? r.value("type", "") : "";
    if (type == "office") {
      if (auto o = office_record_of(r); o.ok()) out.office = *o;
    } else if (type == "vote") {
      if (auto v = vote_record_of(r); v.ok()) out.vote = *v;
    } else if (type == "office_started") {
      if (auto st = office_started_record_of(r); st.ok()) out.started = st->epoch;
    }
  }
  return out;
}

Recovery recover(const std::vector<Standing>& standings) {
  Recovery r;
  for (const auto& s : standings) {
    if (s.committed_round > r.round || (r.digest.empty() && s.committed_round == r.round)) {
      r.round = s.committed_round;
      r.digest = s.anchor_digest;
      r.tokens = s.tokens;
      r.final = s.final;
      r.attempt = s.committed_attempt;
    } else if (s.committed_round == r.round) {
      // The same round known by several: the most its voters counted (a
      // state taken by STATE_SYNC may not say its tokens) and its attempt.
      r.tokens = std::max(r.tokens, s.tokens);
      r.final = r.final || s.final;
      if (!r.attempt) r.attempt = s.committed_attempt;
    }
  }
  if (r.final) return r;
  const std::uint64_t next = r.round + 1;
  std::optional<std::uint64_t> newest;  // the newest attempt of the next round any voter saw
  bool later_planned = false;           // a plan of a later round: the next one committed
  std::uint64_t best_attempt = 0;
  bool any_pending = false;
  for (const auto& s : standings) {
    if (s.newest_round == next) newest = std::max(newest.value_or(0), s.newest_attempt);
    if (s.newest_round > next) later_planned = true;
    if (s.pending && s.pending->round == next) {
      newest = std::max(newest.value_or(0), s.pending->attempt);
      best_attempt = any_pending ? std::max(best_attempt, s.pending->attempt) : s.pending->attempt;
      any_pending = true;
    }
  }
  if (any_pending && (later_planned || best_attempt == *newest)) {
    // The attempt's digest: the participants' (an observer that computed
    // another was not counted); without a participant among the voters, the
    // one most observers computed.
    std::map<std::string, int> participant_votes, observer_votes;
    const PendingCommit* example = nullptr;
    for (const auto& s : standings)
      if (s.pending && s.pending->round == next && s.pending->attempt == best_attempt) {
        ++(s.pending->participant ? participant_votes : observer_votes)[s.pending->anchor_digest];
        if (!example || s.pending->participant) example = &*s.pending;
      }
    // Observers count only when they all agree: one that computed another
    // anchor was not counted by the coordinator either.
    if (participant_votes.empty() && observer_votes.size() > 1) observer_votes.clear();
    const auto& votes = participant_votes.empty() ? observer_votes : participant_votes;
    std::string digest;
    int top = 0;
    bool tie = false;
    for (const auto& [d, n] : votes) {
      if (n > top) {
        top = n;
        digest = d;
        tie = false;
      } else if (n == top) {
        tie = true;
      }
    }
    if (!tie && !digest.empty()) {
      PendingCommit c = *example;
      c.anchor_digest = digest;
      for (const auto& s : standings)  // the plan's tokens, as a participant knew them
        if (s.pending && s.pending->round == next && s.pending->attempt == best_attempt && s.pending->tokens > 0)
          c.tokens = std::max(c.tokens, s.pending->tokens);
      r.complete = c;
      return r;
    }
  }
  if (newest) r.abandon = *newest;
  return r;
}

SuccessionMachine::SuccessionMachine(SuccessionOptions options, const OfficeRecords& journal, Clock::time_point now)
    : options_(std::move(options)),
      office_(journal.office.value_or(Office{0, options_.named})),
      vote_(journal.vote),
      office_heard_(now) {
  // A vote in a later epoch than the last office known: that election's
  // winner is not known yet, and older epochs are over for this site.
  if (vote_ && vote_->epoch > office_.epoch) office_ = Office{vote_->epoch, ""};
  highest_epoch_ = office_.epoch;
}

void SuccessionMachine::office_heard(Clock::time_point now) {
  office_heard_ = now;
  office_unheard_since_start_ = false;
}

std::set<std::string> SuccessionMachine::live(Clock::time_point now) const {
  std::set<std::string> out{options_.self};
  for (const auto& [site, at] : heard_)
    if (now - at < options_.heartbeat_timeout) out.insert(site);
  return out;
}

Millis SuccessionMachine::silence(Clock::time_point now) const {
  if (acting() || now <= office_heard_) return Millis(0);
  return std::chrono::duration_cast<Millis>(now - office_heard_);
}

std::optional<std::size_t> SuccessionMachine::rank(const Standing& mine, Clock::time_point now) const {
  struct Candidate {
    std::uint64_t committed;
    std::size_t index;
    std::string site;
  };
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < options_.sites.size(); ++i) {
    const auto& s = options_.sites[i];
    if (s == office_.coordinator) continue;  // the silent one
    if (s == options_.self) {
      candidates.push_back({mine.committed_round, i, s});
      continue;
    }
    auto heard = heard_.find(s);
    if (heard == heard_.end() || now - heard->second >= options_.heartbeat_timeout) continue;
    auto c = committed_.find(s);
    candidates.push_back({c == committed_.end() ? 0 : c->second, i, s});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.committed != b.committed ? a.committed > b.committed : a.index < b.index;
  });
  for (std::size_t k = 0; k < candidates.size(); ++k)
    if (candidates[k].site == options_.self) return k;
  return std::nullopt;
}

void SuccessionMachine::learn(const Office& office, const std::string& from, Clock::time_point now) {
  if (office.epoch < office_.epoch) return;
  if (office.epoch == office_.epoch && !office_.coordinator.empty()) return;
  // A peer that has not heard of the resignation yet: the office stays vacant until an election fills it.
  if (office.coordinator == options_.self && resigned_epoch_ && office.epoch <= *resigned_epoch_) return;
  const bool was_acting = acting();
  office_ = office;
  highest_epoch_ = std::max(highest_epoch_, office.epoch);
  office_heard(now);
  candidacy_.reset();
  if (office.epoch > 0) ++failovers_;
  // Followed first, and kept in memory even if the journal refuses the
  // record (a full disk): nothing sent depends on it, and a site that
  // cannot write must still follow the office it was told of. Started
  // again without it, the site learns it again from the holder.
  act(Follow{office_});
  act(Persist{office_record(office)});
  undo_.reset();
  if (was_acting)
    note(cat("this site no longer coordinates the job: ", office.coordinator, " holds the office of epoch ",
             office.epoch, " (learned from ", from, ")"));
  else note(cat(office.coordinator, " coordinates the job in epoch ", office.epoch, " (learned from ", from, ")"));
}

void SuccessionMachine::adopt_epoch(std::uint64_t epoch, const std::string& from, Clock::time_point now) {
  if (epoch <= office_.epoch) return;
  const bool was_acting = acting();
  const Office before = office_;
  office_ = Office{epoch, ""};
  highest_epoch_ = std::max(highest_epoch_, epoch);
  office_heard(now);  // the election's winner has a heartbeat timeout to show itself
  candidacy_.reset();
  act(Follow{office_});  // as learn(): followed even if the journal refuses the record
  act(Persist{office_record(office_)});
  undo_.reset();
  note(cat(from, " is in epoch ", epoch, ", whose election is open: epoch ", before.epoch,
           was_acting ? std::string(" is over and this site no longer coordinates the job")
                      : cat(" (coordinator ", before.coordinator.empty() ? std::string("none") : before.coordinator,
                            ") is over here")));
}

void SuccessionMachine::on_persist_failed(Clock::time_point now) {
  if (!undo_) return;
  office_ = undo_->office;
  vote_ = undo_->vote;
  office_heard_ = undo_->office_heard;
  undo_.reset();
  candidacy_.reset();
  not_before_ = std::max(not_before_, now + options_.resend);  // not again at once
  note(cat("the journal refused a record: the office stays epoch ", office_.epoch,
           office_.coordinator.empty() ? std::string(" (open)") : cat(" (", office_.coordinator, ")")));
}

void SuccessionMachine::resign(const std::string& why, Clock::time_point now) {
  if (!acting()) return;
  resigned_epoch_ = office_.epoch;
  office_ = Office{office_.epoch, ""};
  office_heard(now);
  // It left because it cannot act (a journal that refuses, a stall): every
  // other site gets its turn to stand first, whatever this site's rank.
  candidacy_.reset();
  not_before_ = std::max(not_before_, now + options_.heartbeat_timeout * static_cast<int>(1 + options_.sites.size()));
  // Followed first: the site stops acting on the office even if the journal
  // then refuses the vacancy's record (a full disk), which nothing sent depends on.
  act(Follow{office_});
  act(Persist{office_record(office_)});
  undo_.reset();  // vacant in memory even if the journal refuses
  note(cat("this site leaves the coordinator's office of epoch ", office_.epoch, ": ", why));
}

void SuccessionMachine::on_lost(const std::string& site, Clock::time_point now) {
  if (std::find(options_.sites.begin(), options_.sites.end(), site) == options_.sites.end() || site == options_.self)
    return;
  const auto silent_since = now - options_.heartbeat_timeout;
  auto heard = heard_.find(site);
  if (heard != heard_.end()) heard->second = std::min(heard->second, silent_since);
  lost_.insert(site);
  if (site == office_.coordinator && !acting()) office_heard_ = std::min(office_heard_, silent_since);
}

void SuccessionMachine::on_heartbeat(const std::string& from, const HeartbeatMessage& hb, Clock::time_point now) {
  if (std::find(options_.sites.begin(), options_.sites.end(), from) == options_.sites.end() || from == options_.self)
    return;
  heard_[from] = now;
  lost_.erase(from);
  committed_[from] = hb.committed;
  highest_epoch_ = std::max(highest_epoch_, hb.epoch);
  if (!hb.coordinator.empty() &&
      (hb.epoch > office_.epoch || (hb.epoch == office_.epoch && office_.coordinator.empty())))
    learn(Office{hb.epoch, hb.coordinator}, from, now);
  else if (hb.epoch > office_.epoch)
    adopt_epoch(hb.epoch, from, now);  // an election of a newer epoch is open: older offices are over
  if (from == office_.coordinator && hb.epoch == office_.epoch && hb.coordinator == from) office_heard(now);
}

Status SuccessionMachine::admit(const std::string& from, std::uint64_t epoch, Clock::time_point now) {
  if (epoch < office_.epoch)
    return Status(Err::mismatch, cat("epoch ", epoch, " of ", from, " is over: this site is in epoch ", office_.epoch,
                                     office_.coordinator.empty() ? std::string(" (an election)")
                                                                 : cat(" (coordinator ", office_.coordinator, ")")));
  if (epoch == office_.epoch && !office_.coordinator.empty()) {
    if (office_.coordinator != from)
      return Status(Err::invalid_argument, cat(from, " sent a coordinator's message of epoch ", epoch,
                                               ", whose coordinator is ", office_.coordinator));
    office_heard(now);
    return {};
  }
  learn(Office{epoch, from}, from, now);  // the winner of this site's open election, or of a newer one
  return {};
}

void SuccessionMachine::refuse(const std::string& to, const ElectMessage& elect, std::string why) {
  act(Send{to, VoteMessage{office_.epoch, elect.pre, false, std::move(why), office_.coordinator, {}}});
}

void SuccessionMachine::on_elect(const std::string& from, const ElectMessage& e, const Standing& mine,
                                 Clock::time_point now) {
  if (std::find(options_.sites.begin(), options_.sites.end(), from) == options_.sites.end() || from == options_.self)
    return;
  heard_[from] = now;
  // A pre-vote's epoch is a proposal: it raises nothing, so sites cut off in
  // a minority cannot inflate the epochs by asking each other.
  if (!e.pre) highest_epoch_ = std::max(highest_epoch_, e.epoch);
  if (acting()) return refuse(from, e, cat(options_.self, " holds the office of epoch ", office_.epoch));
  if (!e.pre && vote_ && vote_->epoch == e.epoch) {
    if (vote_->coordinator != from)
      return refuse(from, e, cat(options_.self, " voted for ", vote_->coordinator, " in epoch ", e.epoch));
    act(Send{from, VoteMessage{e.epoch, false, true, "", "", mine}});  // the same vote again
    return;
  }
  if (e.epoch < office_.epoch || (e.epoch == office_.epoch && !office_.coordinator.empty()))
    return refuse(from, e, cat("epoch ", e.epoch, " is taken: ", options_.self, " is in epoch ", office_.epoch));
  if (e.epoch == office_.epoch && vote_ && vote_->epoch == e.epoch)  // a pre-vote for the epoch it voted in
    return refuse(from, e, cat(options_.self, " voted for ", vote_->coordinator, " in epoch ", e.epoch));
  // The open election of this site's own epoch may go on at once; a newer
  // epoch only once the office (or the open election) has been silent here
  // for the timeout: a live holder is not deposed by one site's lost link.
  if (const Millis quiet = silence(now);
      e.epoch > office_.epoch && quiet < options_.heartbeat_timeout && !office_unheard_since_start_)
    return refuse(
        from, e,
        office_.coordinator.empty()
            ? cat(options_.self, " is in epoch ", office_.epoch, ", whose election opened ", quiet.count(), " ms ago")
            : cat(options_.self, " heard coordinator ", office_.coordinator, " ", quiet.count(), " ms ago"));
  if (e.committed_round < mine.committed_round)
    return refuse(
        from, e,
        cat(from, " has committed round ", e.committed_round, ", ", options_.self, " round ", mine.committed_round));
  // Two sites may ask for pre-votes at once (both saw the holder close its
  // connections, each ranked first by heartbeats a round old): the one that
  // ranks after backs the other, so that they do not split the votes.
  if (e.pre && candidacy_ && candidacy_->pre) {
    const auto place = [&](const std::string& s) {
      return std::find(options_.sites.begin(), options_.sites.end(), s) - options_.sites.begin();
    };
    if (e.committed_round == mine.committed_round && place(options_.self) < place(from))
      return refuse(from, e,
                    cat(options_.self, " stands for epoch ", candidacy_->epoch, " too, and ranks before ", from));
    note(cat("backs ", from, ", which stands too and ranks before this site"));
    candidacy_.reset();
  }
  // Backing a candidate: this site does not stand itself for a timeout, so
  // two candidates do not split the voters round after round.
  not_before_ = std::max(not_before_, now + options_.heartbeat_timeout);
  if (e.pre) {
    act(Send{from, VoteMessage{e.epoch, true, true, "", "", mine}});
    return;
  }
  const Undo before{office_, vote_, office_heard_};
  vote_ = Office{e.epoch, from};
  office_ = Office{e.epoch, ""};
  office_heard(now);
  candidacy_.reset();
  act(Persist{vote_record(*vote_)});
  undo_ = before;
  act(Follow{office_});
  act(Send{from, VoteMessage{e.epoch, false, true, "", "", mine}});
  note(cat("voted for ", from, " in epoch ", e.epoch, " (it has committed round ", e.committed_round, ")"));
}

void SuccessionMachine::on_vote(const std::string& from, const VoteMessage& v, Clock::time_point now) {
  if (std::find(options_.sites.begin(), options_.sites.end(), from) == options_.sites.end() || from == options_.self)
    return;
  heard_[from] = now;
  highest_epoch_ = std::max(highest_epoch_, v.epoch);
  if (!v.granted && v.epoch > office_.epoch) {
    if (!v.coordinator.empty()) learn(Office{v.epoch, v.coordinator}, from, now);
    else adopt_epoch(v.epoch, from, now);
    return;
  }
  if (!candidacy_ || v.epoch != candidacy_->epoch || v.pre != candidacy_->pre) return;
  if (!v.granted) return;  // said again at the lapse, if it lapses
  candidacy_->granted.insert(from);
  candidacy_->standings[from] = v.standing;
}

void SuccessionMachine::send_elect(Clock::time_point now) {
  candidacy_->sent = now;
  const std::uint64_t committed =
      candidacy_->standings.count(options_.self) ? candidacy_->standings.at(options_.self).committed_round : 0;
  for (const auto& s : options_.sites)
    if (s != options_.self && !candidacy_->granted.count(s))
      act(Send{s, ElectMessage{candidacy_->epoch, candidacy_->pre, committed}});
}

SuccessionMachine::Actions SuccessionMachine::step(const Standing& mine, Clock::time_point now) {
  std::optional<Clock::time_point> wake;
  if (!acting()) {
    if (candidacy_) {
      Candidacy& c = *candidacy_;
      c.standings[options_.self] = mine;
      if (majority(c.granted)) {
        std::string voters;
        for (const auto& g : c.granted) voters += (voters.empty() ? "" : ", ") + g;
        if (c.pre) {
          const Undo before{office_, vote_, office_heard_};
          vote_ = Office{c.epoch, options_.self};
          office_ = Office{c.epoch, ""};
          office_heard(now);
          act(Persist{vote_record(*vote_)});
          undo_ = before;
          act(Follow{office_});
          note(cat("pre-votes of ", voters, ": standing for election in epoch ", c.epoch));
          const std::uint64_t epoch = c.epoch;
          candidacy_ = Candidacy{epoch, false, now, now, {options_.self}, {{options_.self, mine}}};
          send_elect(now);
        } else {
          std::vector<Standing> standings;
          for (const auto& [site, s] : c.standings)
            if (c.granted.count(site)) standings.push_back(s);
          const Undo before{office_, vote_, office_heard_};
          office_ = Office{c.epoch, options_.self};
          office_heard(now);
          ++failovers_;
          act(Persist{office_record(office_)});
          undo_ = before;
          act(TakeOffice{office_, recover(standings), live(now)});
          note(cat("took the coordinator's office in epoch ", c.epoch, " with the votes of ", voters));
          candidacy_.reset();
        }
      } else if (now - c.began >= options_.heartbeat_timeout) {
        note(cat("the ", c.pre ? "pre-vote" : "election", " for epoch ", c.epoch, " lapsed with ", c.granted.size(),
                 " of ", majority_words(options_.sites, options_.named)));
        candidacy_.reset();
        // Again after the timeout, times this site's place: the others stand in turn meanwhile.
        const auto place = rank(mine, now).value_or(0);
        not_before_ = now + options_.heartbeat_timeout * static_cast<int>(1 + place);
      } else if (now - c.sent >= options_.resend) {
        send_elect(now);
      }
      if (candidacy_)
        wake = std::min(candidacy_->sent + options_.resend, candidacy_->began + options_.heartbeat_timeout);
    }
    if (!candidacy_ && !acting()) {
      const auto place = rank(mine, now);
      if (place) {
        const auto wait = options_.heartbeat_timeout * static_cast<int>(1 + *place);
        const auto stand_at = std::max(office_heard_ + wait, not_before_);
        if (now >= stand_at) {
          const std::uint64_t epoch = std::max(highest_epoch_, office_.epoch) + 1;
          if (epoch >= kMaxEpochs) {
            if (!epochs_spent_)
              note(cat("cannot stand for epoch ", epoch, ": a job has at most ", kMaxEpochs - 1, " failovers"));
            epochs_spent_ = true;
            not_before_ = now + options_.heartbeat_timeout;
          } else {
            note(office_.coordinator.empty()
                     ? cat("nobody took the office of epoch ", office_.epoch, " within ", silence(now).count() / 1000.0,
                           " s; asking for pre-votes for epoch ", epoch)
                 : lost_.count(office_.coordinator)
                     ? cat("coordinator ", office_.coordinator, " (epoch ", office_.epoch,
                           ") closed its connections; asking for pre-votes for epoch ", epoch)
                     : cat("coordinator ", office_.coordinator, " (epoch ", office_.epoch, ") has been silent for ",
                           silence(now).count() / 1000.0, " s; asking for pre-votes for epoch ", epoch));
            candidacy_ = Candidacy{epoch, true, now, now, {options_.self}, {{options_.self, mine}}};
            send_elect(now);
            wake = now + options_.resend;
          }
        } else {
          wake = wake ? std::min(*wake, stand_at) : stand_at;
        }
      } else {
        const auto check = now + options_.heartbeat_timeout;
        wake = wake ? std::min(*wake, check) : check;
      }
    }
  }
  Actions out;
  out.actions = std::move(actions_);
  out.notes = std::move(notes_);
  out.wake_at = wake;
  actions_.clear();
  notes_.clear();
  return out;
}

}  // namespace geoloco::daemon
