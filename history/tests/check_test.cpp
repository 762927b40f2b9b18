// The history checker on made-up federations: a clean run passes with its
// figures, and each broken promise (two digests, a round applied twice or
// skipped, no last round, a site that did not finish, tokens counted twice,
// never reported or lost silently, a restart from the future) is named.
#include <catch2/catch.hpp>
#include <map>

#include "history/check.h"

using namespace geoloco;
using namespace geoloco::history;

namespace {

std::string digest_of(std::uint64_t round) { return cat("d", round); }

// Sites a (the coordinator), b and c: each trains 100 tokens per round from
// that round's anchor; rounds 1..3, the third the last, one second apart.
struct Federation {
  std::vector<std::string> names{"a", "b", "c"};
  std::map<std::string, std::vector<Record>> h;
  std::int64_t t = 1000;

  void add(const std::string& site, Event e) { h[site].push_back({t++, std::move(e)}); }
  Committed round(std::uint64_t r, bool final) {
    Committed c;
    c.round = r;
    c.coordinator = "a";
    c.participants = names;
    for (const auto& n : names) c.contributions.push_back({n, r, 100, 100});
    c.digest = digest_of(r);
    c.final = final;
    return c;
  }
  Federation() {
    for (const auto& n : names) {
      add(n, Started{n, 0, "", "nothing"});
      if (n != "a") add(n, StateSyncApplied{0, digest_of(0), "a"});
    }
    for (std::uint64_t r = 1; r <= 3; ++r) {
      for (const auto& n : names) add(n, TrainerTokens{r, 0, 100});
      t += 1000;
      for (const auto& n : names) add(n, round(r, r == 3));
    }
    for (const auto& n : names) add(n, Ended{"finished", 3, digest_of(3), ""});
  }
  CheckInput input() const {
    CheckInput in;
    for (const auto& [site, records] : h) in.sites.push_back({cat(site, "/history.jsonl"), records, false});
    return in;
  }
  // The index in `site`'s history of its first event of `name` for round `r`.
  std::size_t find(const std::string& site, std::string_view name, std::uint64_t r) {
    const auto& v = h.at(site);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const Event& e = v[i].event;
      if (event_name(e) != name) continue;
      const std::uint64_t round = std::visit([](const auto& x) { return x.round; }, e);
      if (round == r) return i;
    }
    FAIL("no " << name << " of round " << r << " at " << site);
    return 0;
  }
  void erase(const std::string& site, std::string_view name, std::uint64_t r) {
    h[site].erase(h[site].begin() + static_cast<std::ptrdiff_t>(find(site, name, r)));
  }
  void insert_before(const std::string& site, std::string_view name, std::uint64_t r, Event e) {
    auto at = h[site].begin() + static_cast<std::ptrdiff_t>(find(site, name, r));
    h[site].insert(at, {at->t_ms, std::move(e)});
  }
};

}  // namespace

TEST_CASE("a clean federation's histories pass, with their figures") {
  Federation f;
  auto r = check_history(f.input());
  INFO(r.violation);
  REQUIRE(r.ok());
  CHECK(r.summary.sites == 3);
  CHECK(r.summary.rounds == 3);
  CHECK(r.summary.digests_compared == 2 + 9 + 3);  // two state syncs, nine commits, three ends
  CHECK(r.summary.tokens_reported == 900);
  CHECK(r.summary.tokens_committed == 900);
  CHECK(r.summary.tokens_dropped == 0);
  CHECK(r.summary.tokens_in_memory == 0);
  CHECK(r.summary.restarts == 0);
  // From the first record (t = 1000) to round 1's first commit: 5 records and
  // the 1000 ms pause after the first trainer reports.
  CHECK(r.summary.longest_without_commit_ms == 1008);
  CHECK(summary_text(r.summary).find("tokens: 900 reported, 900 committed, 0 dropped (0 drops), 0 lost") !=
        std::string::npos);
}

TEST_CASE("two digests for one round are a divergence, named with both sides") {
  Federation f;
  std::get<Committed>(f.h["c"][f.find("c", "committed", 2)].event).digest = "other";
  auto r = check_history(f.input());
  CHECK(r.violation == "round 2 has two digests: a (committed) says d2, c (committed) says other");

  Federation j;
  auto in = j.input();
  in.journal = {{1, "d1", false}, {2, "forged", false}};
  CHECK(check_history(in).violation ==
        "round 2 has two digests: the coordinator's journal says forged, a (committed) says d2");
  in.journal = {{1, "d1", false}, {2, "d2", false}, {3, "d3", true}};
  CHECK(check_history(in).ok());
  in.journal.push_back({4, "d4", false});
  CHECK(check_history(in).violation ==
        "round 4 is committed in the coordinator's journal, but no site given holds it: the work it counted cannot "
        "be checked (is a site's history missing?)");
}

TEST_CASE("a round journaled by a coordinator killed before any site recorded it is held, its work unchecked") {
  // Every site reported its phase of round 2 and was killed; the coordinator
  // had journaled round 2. On restart a rebuilds it from its round log, b and
  // c take it from a: no history records round 2 as applied.
  Federation f;
  for (const auto& n : f.names) {
    const auto at = f.find(n, "committed", 2);
    f.h[n].erase(f.h[n].begin() + static_cast<std::ptrdiff_t>(at), f.h[n].end());
  }
  f.t += 1000;
  f.add("a", Started{"a", 2, digest_of(2), "checkpoint", {{2, digest_of(2)}}});
  for (const auto& n : {"b", "c"}) {
    f.add(n, Started{n, 1, digest_of(1), "checkpoint"});
    f.add(n, StateSyncApplied{2, digest_of(2), "a"});
  }
  for (const auto& n : f.names) f.add(n, TrainerTokens{3, 0, 100});
  for (const auto& n : f.names) f.add(n, f.round(3, true));
  for (const auto& n : f.names) f.add(n, Ended{"finished", 3, digest_of(3), ""});
  auto in = f.input();
  in.journal = {{1, "d1", false, 300}, {2, "d2", false, 300}, {3, "d3", true, 300}};
  auto r = check_history(in);
  INFO(r.violation);
  REQUIRE(r.ok());
  CHECK(r.summary.rounds_unrecorded == 1);
  CHECK(r.summary.tokens_unrecorded == 300);
  CHECK(r.summary.tokens_committed == 600);
  CHECK(r.summary.tokens_in_memory == 300);  // round 2's phases, in the killed runs
  CHECK(summary_text(r.summary).find("rounds committed with no site's record of their work: 1 (300 tokens") !=
        std::string::npos);
  // A journal round that the sites skipped is still no round held.
  in.journal.push_back({4, "d4", false, 300});
  CHECK(check_history(in).violation.find("round 4 is committed in the coordinator's journal, but no site given holds "
                                         "it") == 0);
}

TEST_CASE("a round applied twice, or skipped without a state from a peer, is named") {
  Federation twice;
  twice.h["b"].insert(twice.h["b"].begin() + static_cast<std::ptrdiff_t>(twice.find("b", "committed", 2)) + 1,
                      {5000, twice.round(2, false)});
  CHECK(check_history(twice.input()).violation == "b applied round 2 twice (it held round 2)");

  Federation gap;
  gap.erase("c", "committed", 2);
  CHECK(check_history(gap.input()).violation ==
        "c applied round 3 while holding round 1: no state taken from a peer covers the rounds between");
  gap.insert_before("c", "committed", 3, StateSyncApplied{2, digest_of(2), "a"});
  // The round-2 phase c reported is now counted by round 2 of the others' commits.
  auto r = check_history(gap.input());
  INFO(r.violation);
  CHECK(r.ok());
  CHECK(r.summary.state_syncs == 3);

  Federation wrong;
  wrong.erase("c", "committed", 2);
  wrong.insert_before("c", "committed", 3, StateSyncApplied{2, "stale", "b"});
  CHECK(check_history(wrong.input()).violation ==
        "round 2 has two digests: a (committed) says d2, c (state_sync_applied) from b says stale");
}

TEST_CASE("the sites must agree on who took part in a round") {
  Federation f;
  auto& c = std::get<Committed>(f.h["b"][f.find("b", "committed", 1)].event);
  c.attempt = 1;
  CHECK(check_history(f.input()).violation == "round 1: a committed attempt 0 of [a, b, c], b attempt 1 of [a, b, c]");
}

TEST_CASE("the job must reach its last round, and every site end finished on it") {
  Federation open;
  std::get<Committed>(open.h["a"][open.find("a", "committed", 3)].event).final = false;
  std::get<Committed>(open.h["b"][open.find("b", "committed", 3)].event).final = false;
  std::get<Committed>(open.h["c"][open.find("c", "committed", 3)].event).final = false;
  CHECK(check_history(open.input()).violation ==
        "the job did not reach its stop condition: no round was committed as its last (the highest committed is 3)");

  Federation killed;
  killed.h["c"].pop_back();
  CHECK(check_history(killed.input()).violation ==
        "c did not end: its last run was killed or still runs (name it with --down)");
  auto in = killed.input();
  in.allowed_down = {"c"};
  CHECK(check_history(in).ok());

  Federation missing;  // c's folder left out
  auto partial = missing.input();
  partial.sites.pop_back();
  partial.job_sites = {"a", "b", "c"};
  CHECK(check_history(partial).violation ==
        "no history of c, a site of the job, was given: every site's folder is needed, a site that is down too");
  partial.allowed_down = {"c"};  // down is not absent: its work is in the ledger
  CHECK(check_history(partial).violation ==
        "no history of c, a site of the job, was given: every site's folder is needed, a site that is down too");

  Federation stopped;
  stopped.h["b"].back().event = Ended{"stopped", 2, digest_of(2), "the daemon stops"};
  CHECK(check_history(stopped.input()).violation ==
        "b ended stopped at round 2; the job's last round is 3 (the daemon stops)");
}

TEST_CASE("the token ledger: counted once, dropped with a reason, or lost with a site's memory") {
  // What the checker says of b's round-2 work that no phase it reported before applying round 2 matches.
  const std::string not_reported_round_2 =
      "round 2 counts 100 tokens of b trained for round 2 (fragment 0), which its trainer never reported before b "
      "applied the round (or another round counts them too)";
  Federation missing;
  missing.erase("b", "trainer_tokens", 2);
  CHECK(check_history(missing.input()).violation == not_reported_round_2);

  // A phase reported only after its site applied the round cannot be in it
  // (a phase trained again after a restart, say, standing for one lost).
  Federation after;
  after.erase("b", "trainer_tokens", 2);
  after.insert_before("b", "trainer_tokens", 3, TrainerTokens{2, 0, 100});
  CHECK(check_history(after.input()).violation == not_reported_round_2);

  // Work of another fragment is other work.
  Federation fragment;
  fragment.erase("b", "trainer_tokens", 2);
  fragment.insert_before("b", "committed", 2, TrainerTokens{2, 1, 100});
  CHECK(check_history(fragment.input()).violation == not_reported_round_2);

  Federation silent;  // b's trainer reports a phase after the last round, which nothing accounts for
  silent.insert_before("b", "ended", 3, TrainerTokens{4, 0, 70});
  CHECK(check_history(silent.input()).violation ==
        "b's trainer reported 70 tokens for round 4 that no committed round counts and no 'dropped' event names: "
        "lost silently");
  silent.insert_before("b", "ended", 3, Dropped{4, "b", 70, "the job finished"});
  auto dropped = check_history(silent.input());
  INFO(dropped.violation);
  REQUIRE(dropped.ok());
  CHECK(dropped.summary.tokens_dropped == 70);
  CHECK(dropped.summary.drops == 1);
  CHECK(dropped.summary.tokens_reported == 970);

  Federation twice;  // a drop of work a round also counts
  twice.insert_before("b", "ended", 3, Dropped{3, "b", 100, "late"});
  CHECK(check_history(twice.input()).violation ==
        "b dropped 100 tokens trained for round 3, which its trainer never reported (or are counted elsewhere too)");

  // c is killed after reporting round 2's phase, restarts from round 1 and
  // trains round 2 again: the first phase was lost with its memory.
  Federation crash;
  const std::size_t at = crash.find("c", "committed", 2);
  crash.h["c"].insert(crash.h["c"].begin() + static_cast<std::ptrdiff_t>(at),
                      {{3200, Started{"c", 1, digest_of(1), "checkpoint"}}, {3201, TrainerTokens{2, 0, 100}}});
  auto r = check_history(crash.input());
  INFO(r.violation);
  REQUIRE(r.ok());
  CHECK(r.summary.restarts == 1);
  CHECK(r.summary.tokens_in_memory == 100);
  CHECK(r.summary.tokens_committed == 900);
}

TEST_CASE("a restart from a round the site never held: nothing may be built on it until a peer's state") {
  // c restarts from a checkpoint claiming round 5 (damaged: it held round 1)
  // and commits round 2 on top of it.
  Federation f;
  const std::size_t at = f.find("c", "committed", 2);
  f.h["c"].insert(f.h["c"].begin() + static_cast<std::ptrdiff_t>(at), {3200, Started{"c", 5, "d5", "checkpoint"}});
  CHECK(check_history(f.input()).violation ==
        "c applied round 2 on top of round 5 from its checkpoint, a round it never held and took from no peer");
  // The same start, then the committed state of round 1 from a peer: the
  // checkpoint was refused, and the history goes on.
  Federation refused;
  const std::size_t at2 = refused.find("c", "committed", 2);
  refused.h["c"].insert(refused.h["c"].begin() + static_cast<std::ptrdiff_t>(at2),
                        {{3200, Started{"c", 5, "d5", "checkpoint"}}, {3201, StateSyncApplied{1, digest_of(1), "a"}}});
  auto r = check_history(refused.input());
  INFO(r.violation);
  REQUIRE(r.ok());
  CHECK(r.summary.checkpoints_ahead == 1);
  CHECK(r.summary.restarts == 1);
  CHECK_THAT(summary_text(r.summary), Catch::Contains("checkpoints ahead of the history: 1"));

  // c restarts at the end from a damaged checkpoint claiming round 3 with
  // another anchor, and is stopped before it takes a peer's state: its
  // `ended` claims no digest (it never verified that state).
  Federation stopped;
  stopped.add("c", Started{"c", 4, "bogus", "checkpoint"});
  stopped.add("c", Ended{"stopped", 4, "bogus", "stopped"});
  auto in = stopped.input();
  in.allowed_down = {"c"};
  auto s = check_history(in);
  INFO(s.violation);
  CHECK(s.ok());
  CHECK(s.summary.checkpoints_ahead == 1);
}

TEST_CASE("rounds a restart rebuilt from its round log are claimed with their digests and may be built on") {
  // c is killed after its journal learned round 2 and before it applied it;
  // it restarts from its checkpoint of round 1, rebuilds round 2 from its
  // round log, and commits round 3 on top of it.
  auto restarted = [](std::vector<RoundDigest> rebuilt) {
    Federation f;
    f.erase("c", "committed", 2);
    const std::size_t at = f.find("c", "committed", 3);
    f.h["c"].insert(f.h["c"].begin() + static_cast<std::ptrdiff_t>(at),
                    {3200, Started{"c", 2, digest_of(2), "checkpoint", std::move(rebuilt)}});
    return f;
  };
  auto ok = check_history(restarted({{2, digest_of(2)}}).input());
  INFO(ok.violation);
  REQUIRE(ok.ok());
  CHECK(ok.summary.restarts == 1);
  CHECK(ok.summary.checkpoints_ahead == 0);
  // Rebuilt to another anchor than the round's: a divergence.
  CHECK(check_history(restarted({{2, "d2-other"}}).input()).violation ==
        "round 2 has two digests: a (committed) says d2, c (started) rebuilt from its round log says d2-other");
  // Without the rebuilt rounds, the same start is a checkpoint ahead of the history.
  CHECK(check_history(restarted({}).input()).violation ==
        "c applied round 3 on top of round 2 from its checkpoint, a round it never held and took from no peer");
  // Rebuilt on a checkpoint of a round it never held: still ahead.
  Federation ahead;
  ahead.erase("c", "committed", 2);
  ahead.erase("c", "committed", 3);
  ahead.h["c"].insert(ahead.h["c"].begin() + static_cast<std::ptrdiff_t>(ahead.find("c", "ended", 3)),
                      {3200, Started{"c", 3, digest_of(3), "checkpoint", {{3, digest_of(3)}}}});
  auto in = ahead.input();
  auto r = check_history(in);
  CHECK(r.summary.checkpoints_ahead == 1);
}

TEST_CASE("a history must begin with its site's start, and each site comes once") {
  Federation f;
  auto in = f.input();
  in.sites[1].records.erase(in.sites[1].records.begin());
  CHECK(check_history(in).violation == "b/history.jsonl: a history begins with a 'started' event");
  auto twice = f.input();
  twice.sites.push_back(twice.sites[0]);
  CHECK(check_history(twice).violation == "a/history.jsonl: site 'a' given twice");
}
