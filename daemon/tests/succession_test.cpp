// The coordinator's succession with a fixed clock: the recovery from the
// voters' standings, and elections among machines wired by a small
// in-memory network with crashes and partitions, each checked by the
// offices, votes and journal records that come out.
#include <catch2/catch.hpp>

#include <deque>
#include <functional>

#include "daemon/succession.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace std::chrono_literals;

namespace {
const Clock::time_point t0{std::chrono::hours(3)};
const std::string kDigest = "00000000000000aa";

Standing standing(std::uint64_t committed, std::string digest = kDigest) {
  Standing s;
  s.committed_round = committed;
  s.anchor_digest = committed ? digest : "";
  s.tokens = committed * 100;
  return s;
}

// Sites wired by a network that delivers every Send at once, heartbeats
// every second, and can crash a site or cut a link.
struct Federation {
  std::vector<std::string> sites;
  std::string named;
  std::map<std::string, SuccessionMachine> machines;
  std::map<std::string, Standing> standings;
  std::map<std::string, std::vector<nlohmann::json>> journals;
  std::map<std::string, std::vector<succession::TakeOffice>> taken;
  std::map<std::string, std::vector<std::string>> notes;
  std::set<std::string> down;
  std::set<std::pair<std::string, std::string>> cut;
  Clock::time_point now = t0;

  Federation(std::vector<std::string> s, std::string n) : sites(std::move(s)), named(std::move(n)) {
    for (const auto& site : sites) add(site, {});
  }
  void add(const std::string& site, const OfficeRecords& records) {
    SuccessionOptions o;
    o.sites = sites;
    o.named = named;
    o.self = site;
    o.heartbeat_timeout = 10s;
    o.resend = 1s;
    machines.erase(site);
    machines.emplace(site, SuccessionMachine(o, records, now));
    standings.emplace(site, standing(4));
  }
  bool reaches(const std::string& a, const std::string& b) const {
    return !down.count(a) && !down.count(b) && !cut.count({a, b}) && !cut.count({b, a});
  }
  void partition(const std::set<std::string>& side) {
    for (const auto& a : sites)
      for (const auto& b : sites)
        if (side.count(a) && !side.count(b)) cut.insert({a, b});
  }
  void heal() { cut.clear(); }
  void deliver(const std::string& from, const std::string& to, const ControlMessage& m) {
    if (!reaches(from, to)) return;
    auto& target = machines.at(to);
    if (const auto* e = std::get_if<ElectMessage>(&m)) target.on_elect(from, *e, standings.at(to), now);
    else if (const auto* v = std::get_if<VoteMessage>(&m)) target.on_vote(from, *v, now);
    else if (const auto* h = std::get_if<HeartbeatMessage>(&m)) target.on_heartbeat(from, *h, now);
  }
  void step_all() {
    for (int pass = 0; pass < 8; ++pass) {
      bool any = false;
      for (const auto& site : sites) {
        if (down.count(site)) continue;
        auto out = machines.at(site).step(standings.at(site), now);
        for (auto& n : out.notes) notes[site].push_back(n);
        for (auto& a : out.actions) {
          any = true;
          if (auto* p = std::get_if<succession::Persist>(&a)) journals[site].push_back(p->record);
          else if (auto* t = std::get_if<succession::TakeOffice>(&a)) taken[site].push_back(*t);
          else if (auto* s = std::get_if<succession::Send>(&a)) deliver(site, s->to, s->message);
        }
      }
      if (!any) return;
    }
  }
  void heartbeats() {
    for (const auto& from : sites) {
      if (down.count(from)) continue;
      const auto& m = machines.at(from);
      HeartbeatMessage h{standings.at(from).committed_round + 1, "inner", m.epoch(), m.office().coordinator,
                         standings.at(from).committed_round};
      for (const auto& to : sites)
        if (to != from) deliver(from, to, h);
    }
  }
  // Runs for `span`, a heartbeat and a step every second.
  void run(Millis span) {
    const auto until = now + span;
    while (now < until) {
      heartbeats();
      step_all();
      now += 1s;
    }
  }
  const Office& office(const std::string& site) const { return machines.at(site).office(); }
  std::vector<std::string> acting() const {
    std::vector<std::string> out;
    for (const auto& s : sites)
      if (!down.count(s) && machines.at(s).acting()) out.push_back(s);
    return out;
  }
};
}  // namespace

TEST_CASE(
    "recovery resumes after the most advanced committed round and completes a pending commit of its newest attempt") {
  Standing b = standing(7, "00000000000000b7");
  Standing c = standing(6, "00000000000000c6");
  b.newest_round = 8;
  b.newest_attempt = 3;
  b.pending = PendingCommit{8, 3, "00000000000000d8", 250};
  Recovery r = recover({c, b});
  CHECK(r.round == 7);
  CHECK(r.digest == "00000000000000b7");
  CHECK(r.tokens == 700);
  REQUIRE(r.complete);
  CHECK(r.complete->attempt == 3);
  CHECK(r.complete->anchor_digest == "00000000000000d8");
  CHECK_FALSE(r.abandon);

  SECTION("a newer attempt seen by another voter voids the pending one") {
    c = standing(7, "00000000000000b7");
    c.newest_round = 8;
    c.newest_attempt = 4;
    r = recover({b, c});
    CHECK_FALSE(r.complete);
    REQUIRE(r.abandon);
    CHECK(*r.abandon == 4);
  }
  SECTION("a plan of a later round proves the next one committed: its pending COMMIT is completed") {
    c = standing(7, "00000000000000b7");
    c.newest_round = 9;  // round 9 was planned, so round 8 committed
    Standing d = b;
    d.newest_attempt = 5;  // and a newer attempt of round 8 was seen than b's pending one
    d.pending.reset();
    r = recover({b, c, d});
    REQUIRE(r.complete);
    CHECK(r.complete->attempt == 3);
    CHECK_FALSE(r.abandon);
  }
  SECTION("an observer that computed another anchor is outvoted by a participant") {
    c = b;
    c.pending->anchor_digest = "00000000000000e8";
    c.pending->participant = false;
    r = recover({c, b});
    REQUIRE(r.complete);
    CHECK(r.complete->anchor_digest == "00000000000000d8");
  }
  SECTION("the tokens of the last committed round are the most any voter counted") {
    c = standing(7, "00000000000000b7");
    c.tokens = 0;  // it took the state by STATE_SYNC and was not told the tokens
    r = recover({c, b});
    CHECK(r.tokens == 700);
  }
  SECTION("two participants' digests for one attempt complete nothing") {
    c = b;
    c.pending->anchor_digest = "00000000000000e8";
    r = recover({b, c});
    CHECK_FALSE(r.complete);
    REQUIRE(r.abandon);
    CHECK(*r.abandon == 3);
  }
  SECTION("a pending commit of a round already committed is stale") {
    c = standing(8, "00000000000000c8");
    r = recover({b, c});
    CHECK(r.round == 8);
    CHECK_FALSE(r.complete);
    CHECK_FALSE(r.abandon);
  }
  SECTION("a finished job completes and abandons nothing") {
    c = standing(8, "00000000000000c8");
    c.final = true;
    c.newest_round = 9;
    r = recover({b, c});
    CHECK(r.final);
    CHECK_FALSE(r.complete);
    CHECK_FALSE(r.abandon);
  }
}

TEST_CASE(
    "the named coordinator's death: the first-ranked site takes office in epoch 1 with a majority, the others follow") {
  Federation f({"a", "b", "c"}, "a");
  f.run(5s);
  CHECK(f.acting() == std::vector<std::string>{"a"});
  f.down.insert("a");
  f.run(9s);
  CHECK(f.acting().empty());  // silent for less than the timeout
  f.run(6s);
  CHECK(f.acting() == std::vector<std::string>{"b"});
  CHECK(f.office("b") == Office{1, "b"});
  CHECK(f.office("c") == Office{1, "b"});
  REQUIRE(f.taken["b"].size() == 1);
  CHECK(f.taken["b"][0].recovery.round == 4);
  // Journaled before it answered, then the office learned.
  REQUIRE(f.journals["c"].size() == 2);
  CHECK(f.journals["c"][0] == vote_record(Office{1, "b"}));
  CHECK(f.journals["c"][1] == office_record(Office{1, "b"}));
  CHECK(f.journals["b"].back() == office_record(Office{1, "b"}));
  CHECK(f.machines.at("b").failovers() == 1);
  CHECK(f.machines.at("c").failovers() == 1);

  SECTION("the old coordinator comes back: it follows epoch 1, and its epoch-0 messages are refused") {
    f.down.erase("a");
    f.add("a", office_records(f.journals["a"]));  // restarted from its (empty) journal: epoch 0, itself
    CHECK(f.machines.at("a").acting());
    f.run(2s);
    CHECK(f.office("a") == Office{1, "b"});
    CHECK(f.acting() == std::vector<std::string>{"b"});
    Status s = f.machines.at("c").admit("a", 0, f.now);
    CHECK(s.code() == Err::mismatch);
    CHECK(s.message() == "epoch 0 of a is over: this site is in epoch 1 (coordinator b)");
    CHECK(f.machines.at("c").admit("b", 1, f.now).ok());
    CHECK(f.machines.at("c").admit("a", 1, f.now).code() == Err::invalid_argument);
  }
}

TEST_CASE("a site that lost only its own link to the coordinator disturbs nobody") {
  Federation f({"a", "b", "c"}, "a");
  f.run(3s);
  f.cut.insert({"a", "c"});
  f.run(40s);
  CHECK(f.acting() == std::vector<std::string>{"a"});
  for (const auto& s : f.sites) CHECK(f.office(s) == Office{0, "a"});
  CHECK(f.journals["b"].empty());  // pre-votes only: nothing journaled, nothing promised
  CHECK(f.journals["c"].empty());
  bool refused = false;
  for (const auto& n : f.notes["c"]) refused |= n.find("lapsed with 1 of 2 of the job's 3 sites") != std::string::npos;
  CHECK(refused);
}

TEST_CASE("a partitioned coordinator is deposed by the majority side and follows it after the heal") {
  Federation f({"a", "b", "c"}, "a");
  f.run(3s);
  f.partition({"a"});
  f.run(15s);
  CHECK(f.office("b") == Office{1, "b"});
  CHECK(f.office("c") == Office{1, "b"});
  CHECK(f.machines.at("a").acting());  // it does not know yet; no majority answers it
  CHECK(f.machines.at("b").admit("a", 0, f.now).code() == Err::mismatch);
  f.heal();
  f.run(2s);
  CHECK(f.acting() == std::vector<std::string>{"b"});
  CHECK(f.office("a") == Office{1, "b"});
  bool said = false;
  for (const auto& n : f.notes["a"])
    said |= n == "this site no longer coordinates the job: b holds the office of epoch 1 (learned from b)";
  CHECK(said);
}

TEST_CASE("the most advanced committed round ranks first, and a voter refuses a candidate behind it") {
  Federation f({"a", "b", "c"}, "a");
  f.standings.at("c") = standing(6);
  f.run(3s);
  f.down.insert("a");
  f.run(14s);
  CHECK(f.acting() == std::vector<std::string>{"c"});
  CHECK(f.office("b") == Office{1, "c"});
  CHECK(f.taken["c"].at(0).recovery.round == 6);

  SuccessionOptions o{{"a", "b", "c"}, "a", "b", 10s, 1s};
  SuccessionMachine voter(o, {}, t0);
  voter.on_elect("c", ElectMessage{1, true, 5}, standing(6), t0 + 11s);
  auto out = voter.step(standing(6), t0 + 11s);
  std::vector<VoteMessage> votes;
  for (const auto& a : out.actions)
    if (const auto* s = std::get_if<succession::Send>(&a))
      if (const auto* v = std::get_if<VoteMessage>(&s->message)) votes.push_back(*v);
  REQUIRE(votes.size() == 1);
  CHECK_FALSE(votes[0].granted);
  CHECK(votes[0].reason == "c has committed round 5, b round 6");
}

TEST_CASE("the k-th ranked site stands only after k more timeouts") {
  SuccessionOptions o{{"a", "b", "c"}, "a", "c", 10s, 1s};
  SuccessionMachine c(o, {}, t0);
  auto hb = [&](Clock::time_point at) { c.on_heartbeat("b", HeartbeatMessage{5, "inner", 0, "a", 4}, at); };
  auto elects = [](const SuccessionMachine::Actions& a) {
    int n = 0;
    for (const auto& x : a.actions)
      if (const auto* s = std::get_if<succession::Send>(&x)) n += std::holds_alternative<ElectMessage>(s->message);
    return n;
  };
  for (int s = 0; s <= 15; ++s) {
    hb(t0 + std::chrono::seconds(s));
    CHECK(elects(c.step(standing(4), t0 + std::chrono::seconds(s))) == 0);  // b ranks first
  }
  hb(t0 + 19s);
  CHECK(elects(c.step(standing(4), t0 + 19s)) == 0);
  hb(t0 + 20s);
  CHECK(elects(c.step(standing(4), t0 + 20s)) == 2);  // 2 x the timeout: b did not take office
}

TEST_CASE("with two sites the named coordinator goes on alone, and the other cannot elect itself") {
  Federation f({"a", "b"}, "a");
  f.run(3s);
  f.down.insert("a");
  f.run(60s);
  CHECK(f.office("b") == Office{0, "a"});
  CHECK(f.taken["b"].empty());
  CHECK(f.journals["b"].empty());
  f.down.clear();
  f.add("a", {});
  f.down.insert("b");
  f.run(60s);
  CHECK(f.acting() == std::vector<std::string>{"a"});
}

TEST_CASE("a vote is given once per epoch and survives a restart through the journal") {
  SuccessionOptions o{{"a", "b", "c", "d", "e"}, "a", "c", 10s, 1s};
  SuccessionMachine c(o, {}, t0);
  const auto at = t0 + 11s;  // a silent for the timeout
  c.on_elect("b", ElectMessage{1, false, 4}, standing(4), at);
  auto out = c.step(standing(4), at);
  REQUIRE(out.actions.size() == 3);
  CHECK(std::get<succession::Persist>(out.actions[0]).record == vote_record(Office{1, "b"}));
  CHECK(std::get<succession::Follow>(out.actions[1]).office == Office{1, ""});
  CHECK(std::get<VoteMessage>(std::get<succession::Send>(out.actions[2]).message).granted);

  c.on_elect("d", ElectMessage{1, false, 9}, standing(4), at);
  out = c.step(standing(4), at);
  REQUIRE(out.actions.size() == 1);
  CHECK(std::get<VoteMessage>(std::get<succession::Send>(out.actions[0]).message).reason == "c voted for b in epoch 1");

  std::vector<nlohmann::json> journal{vote_record(Office{1, "b"})};
  SuccessionMachine again(o, office_records(journal), at + 1s);
  CHECK(again.office() == Office{1, ""});
  again.on_elect("d", ElectMessage{1, false, 9}, standing(4), at + 30s);
  out = again.step(standing(4), at + 30s);
  bool refused = false;
  for (const auto& a : out.actions)
    if (const auto* s = std::get_if<succession::Send>(&a))
      if (const auto* v = std::get_if<VoteMessage>(&s->message))
        refused = !v->granted && v->reason == "c voted for b in epoch 1";
  CHECK(refused);
  CHECK(again.admit("a", 0, at + 30s).code() == Err::mismatch);
  CHECK(again.admit("b", 1, at + 30s).ok());
  CHECK(again.office() == Office{1, "b"});
}

TEST_CASE("an office of an older epoch gives way to a newer epoch whose winner is not known") {
  // c voted for b in epoch 1; b died before anyone heard it take office; a
  // comes back holding epoch 0 by its journal.
  Federation f({"a", "b", "c"}, "a");
  f.run(2s);
  f.down.insert("a");
  f.down.insert("b");
  f.machines.at("c").on_elect("b", ElectMessage{1, false, 4}, f.standings.at("c"), f.now + 11s);
  f.now += 12s;
  f.step_all();
  REQUIRE(f.office("c") == Office{1, ""});
  f.down.erase("a");
  f.add("a", {});
  CHECK(f.machines.at("a").acting());
  f.run(30s);
  // a stepped down on c's epoch 1, and one of them holds epoch 2 now.
  const auto acting = f.acting();
  REQUIRE(acting.size() == 1);
  CHECK(f.office("a").epoch == 2);
  CHECK(f.office("c") == f.office("a"));
}

TEST_CASE("a record the journal refuses undoes the vote, and nothing is granted without it") {
  SuccessionOptions o{{"a", "b", "c"}, "a", "c", 10s, 1s};
  SuccessionMachine c(o, {}, t0);
  c.on_elect("b", ElectMessage{1, false, 4}, standing(4), t0 + 11s);
  auto out = c.step(standing(4), t0 + 11s);
  REQUIRE(std::holds_alternative<succession::Persist>(out.actions.at(0)));
  c.on_persist_failed(t0 + 11s);  // the disk is full: the vote did not happen
  CHECK(c.office() == Office{0, "a"});
  c.on_elect("d", ElectMessage{1, false, 4}, standing(4), t0 + 12s);  // d is no site of the job: ignored
  c.on_elect("b", ElectMessage{1, false, 4}, standing(4), t0 + 12s);
  out = c.step(standing(4), t0 + 12s);
  // Asked again: a fresh decision, journaled first again, not "the same vote again".
  REQUIRE_FALSE(out.actions.empty());
  CHECK(std::get<succession::Persist>(out.actions.at(0)).record == vote_record(Office{1, "b"}));
}

TEST_CASE("an office learned from a peer is followed even when the journal refuses its record") {
  SuccessionOptions o{{"a", "b", "c"}, "a", "c", 10s, 1s};
  SuccessionMachine c(o, {}, t0);
  // A vote for b, journaled: it stays whatever the journal does later.
  c.on_elect("b", ElectMessage{1, false, 4}, standing(4), t0 + 11s);
  (void)c.step(standing(4), t0 + 11s);
  // b's heartbeat says it holds epoch 1; c's disk is full.
  c.on_heartbeat("b", HeartbeatMessage{5, "inner", 1, "b", 4}, t0 + 12s);
  auto out = c.step(standing(4), t0 + 12s);
  REQUIRE(out.actions.size() >= 2);
  // Followed first: the wiring stops at a Persist that fails, and the Follow is already done.
  CHECK(std::get<succession::Follow>(out.actions.at(0)).office == Office{1, "b"});
  CHECK(std::get<succession::Persist>(out.actions.at(1)).record == office_record(Office{1, "b"}));
  c.on_persist_failed(t0 + 12s);
  CHECK(c.office() == Office{1, "b"});  // not undone, nor the vote before it
  // Heard again: nothing to learn, nothing to journal again.
  c.on_heartbeat("b", HeartbeatMessage{6, "inner", 1, "b", 5}, t0 + 13s);
  out = c.step(standing(5), t0 + 13s);
  for (const auto& a : out.actions) CHECK_FALSE(std::holds_alternative<succession::Persist>(a));
  // The same for an open epoch learned from a peer, on a coordinator that can no longer write.
  SuccessionMachine a({{"a", "b", "c"}, "a", "a", 10s, 1s}, {}, t0);
  REQUIRE(a.acting());
  a.on_heartbeat("c", HeartbeatMessage{5, "inner", 2, "", 4}, t0 + 1s);
  out = a.step(standing(4), t0 + 1s);
  CHECK(std::get<succession::Follow>(out.actions.at(0)).office == Office{2, ""});
  a.on_persist_failed(t0 + 1s);
  CHECK(a.office() == Office{2, ""});
  CHECK_FALSE(a.acting());  // fenced, though its journal could not say so
}

TEST_CASE("a site that learned an open epoch from a peer still votes in its election at once") {
  SuccessionOptions o{{"a", "b", "c", "d"}, "a", "c", 10s, 1s};
  SuccessionMachine c(o, {}, t0);
  // d voted for b and says so in its heartbeat, before b's ELECT reaches c.
  c.on_heartbeat("d", HeartbeatMessage{5, "inner", 1, "", 4}, t0 + 11s);
  auto adopted = c.step(standing(4), t0 + 11s);
  CHECK(c.office() == Office{1, ""});
  CHECK(std::get<succession::Follow>(adopted.actions.at(0)).office == Office{1, ""});
  CHECK(std::get<succession::Persist>(adopted.actions.at(1)).record == office_record(Office{1, ""}));
  c.on_elect("b", ElectMessage{1, false, 4}, standing(4), t0 + 11s);
  auto out = c.step(standing(4), t0 + 11s);
  bool granted = false;
  for (const auto& a : out.actions)
    if (const auto* s = std::get_if<succession::Send>(&a))
      if (const auto* v = std::get_if<VoteMessage>(&s->message)) granted = v->granted && v->epoch == 1;
  CHECK(granted);
  // But a pre-vote for a newer epoch waits for the open election's timeout.
  c.on_elect("d", ElectMessage{2, true, 4}, standing(4), t0 + 12s);
  out = c.step(standing(4), t0 + 12s);
  bool refused = false;
  for (const auto& a : out.actions)
    if (const auto* s = std::get_if<succession::Send>(&a))
      if (const auto* v = std::get_if<VoteMessage>(&s->message)) refused = !v->granted && v->pre;
  CHECK(refused);
}

TEST_CASE("pre-votes raise no epoch, and a site that backed a candidate does not stand against it") {
  SuccessionOptions o{{"a", "b", "c"}, "a", "c", 10s, 1s};
  SuccessionMachine c(o, {}, t0);
  auto elect_epochs = [](const SuccessionMachine::Actions& a) {
    std::vector<std::uint64_t> out;
    for (const auto& x : a.actions)
      if (const auto* s = std::get_if<succession::Send>(&x))
        if (const auto* e = std::get_if<ElectMessage>(&s->message)) out.push_back(e->epoch);
    return out;
  };
  // b, cut off in a minority, asked again and again with ever higher epochs.
  c.on_heartbeat("a", HeartbeatMessage{5, "inner", 0, "a", 4}, t0 + 1s);
  c.on_elect("b", ElectMessage{50, true, 4}, standing(4), t0 + 1s);
  (void)c.step(standing(4), t0 + 1s);
  // a falls silent; b is not heard either: c stands, for epoch 1, not 51.
  auto out = c.step(standing(4), t0 + 12s);
  REQUIRE_FALSE(elect_epochs(out).empty());
  CHECK(elect_epochs(out).front() == 1);

  SuccessionMachine d(o, {}, t0);
  d.on_heartbeat("b", HeartbeatMessage{5, "inner", 0, "a", 4}, t0 + 10s);
  d.on_elect("b", ElectMessage{1, true, 4}, standing(4), t0 + 11s);  // granted: a is silent here too
  auto backed = d.step(standing(4), t0 + 11s);
  CHECK(elect_epochs(backed).empty());
  d.on_heartbeat("b", HeartbeatMessage{5, "inner", 0, "a", 4}, t0 + 19s);
  CHECK(elect_epochs(d.step(standing(4), t0 + 20s)).empty());  // its rank's turn came, but it backed b
  d.on_heartbeat("b", HeartbeatMessage{5, "inner", 0, "a", 4}, t0 + 21s);
  CHECK_FALSE(elect_epochs(d.step(standing(4), t0 + 22s)).empty());  // b took no office within the timeout
}

TEST_CASE(
    "a coordinator that leaves its office is not handed it back by a peer's old heartbeat; another site takes it") {
  Federation f({"a", "b", "c"}, "a");
  f.standings.at("a") = standing(5);  // a ranks first: it would stand first but for having left
  f.run(3s);
  REQUIRE(f.acting() == std::vector<std::string>{"a"});
  // a cannot lead (its journal refuses decisions): it resigns; b and c
  // still name it in their heartbeats until they hear otherwise.
  f.machines.at("a").resign("its journal refused the plan of round 5 for 10 s", f.now);
  f.step_all();
  CHECK(f.office("a") == Office{0, ""});
  f.run(2s);
  CHECK(f.office("a").coordinator.empty());
  CHECK(f.acting().empty());
  // b stands (after its turn as second in rank) and is elected in epoch 1; a waits.
  f.run(25s);
  CHECK(f.acting() == std::vector<std::string>{"b"});
  CHECK(f.office("a") == Office{1, "b"});
  CHECK(f.office("c") == Office{1, "b"});
}

TEST_CASE("a coordinator whose connections close is succeeded at once, not a heartbeat timeout later") {
  Federation f({"a", "b", "c"}, "a");
  f.run(5s);
  f.down.insert("a");
  for (const char* s : {"b", "c"}) f.machines.at(s).on_lost("a", f.now);
  f.step_all();  // no time passes
  CHECK(f.acting() == std::vector<std::string>{"b"});
  f.heartbeats();  // c learns the winner from b's
  CHECK(f.office("c") == Office{1, "b"});
  bool said = false;
  for (const auto& n : f.notes["b"])
    said |= n == "coordinator a (epoch 0) closed its connections; asking for pre-votes for epoch 1";
  CHECK(said);
}

TEST_CASE("one site's lost connection to a live coordinator deposes nobody, and its next heartbeat undoes it") {
  Federation f({"a", "b", "c"}, "a");
  f.run(5s);
  f.machines.at("b").on_lost("a", f.now);  // only b's link dropped: c still hears a
  f.step_all();
  CHECK(f.acting() == std::vector<std::string>{"a"});
  for (const auto& s : f.sites) CHECK(f.office(s) == Office{0, "a"});
  CHECK(f.journals["b"].empty());
  CHECK(f.journals["c"].empty());
  f.run(30s);  // a's heartbeats reach b again
  CHECK(f.acting() == std::vector<std::string>{"a"});
  for (const auto& s : f.sites) CHECK(f.office(s) == Office{0, "a"});
}

TEST_CASE("two sites that stand at once (stale ranks) do not split the votes: the later-ranked backs the other") {
  Federation f({"a", "b", "c"}, "a");
  f.run(5s);
  // Each heard the other a round behind itself: both rank first.
  f.standings["b"] = standing(5);
  f.standings["c"] = standing(5);
  f.down.insert("a");
  for (const char* s : {"b", "c"}) f.machines.at(s).on_lost("a", f.now);
  // Both step before either hears the other: two pre-vote candidacies, whose requests cross.
  std::vector<std::pair<std::string, succession::Send>> crossing;
  for (const char* s : {"c", "b"}) {
    auto out = f.machines.at(s).step(f.standings.at(s), f.now);
    for (auto& n : out.notes) f.notes[s].push_back(n);
    for (auto& a : out.actions)
      if (auto* send = std::get_if<succession::Send>(&a)) crossing.emplace_back(s, *send);
  }
  REQUIRE(crossing.size() == 4);  // each asks the two others
  for (auto& [from, send] : crossing) f.deliver(from, send.to, send.message);
  f.step_all();
  f.heartbeats();
  CHECK(f.acting() == std::vector<std::string>{"b"});
  CHECK(f.office("c") == Office{1, "b"});
  bool backed = false;
  for (const auto& n : f.notes["c"]) backed |= n == "backs b, which stands too and ranks before this site";
  CHECK(backed);
}

TEST_CASE("a site started a moment ago, that has not reached the coordinator yet, does not hold back its successor") {
  Federation f({"a", "b", "c"}, "a");
  f.run(5s);
  f.add("c", {});      // c restarts: nothing of the office heard since
  f.down.insert("a");  // and a dies before c's connection to it comes up: no on_lost at c
  f.machines.at("b").on_lost("a", f.now);
  f.step_all();  // no time passes
  CHECK(f.acting() == std::vector<std::string>{"b"});
  f.heartbeats();
  CHECK(f.office("c") == Office{1, "b"});

  // Once it has heard the holder, the restarted site protects it like any other.
  Federation g({"a", "b", "c"}, "a");
  g.run(5s);
  g.add("c", {});
  g.heartbeats();                          // c hears a
  g.machines.at("b").on_lost("a", g.now);  // only b's link dropped
  g.step_all();
  CHECK(g.acting() == std::vector<std::string>{"a"});
  CHECK(g.office("b") == Office{0, "a"});
}
