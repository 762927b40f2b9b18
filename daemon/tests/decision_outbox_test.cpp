// The coordinator's decisions go out only once their journal records are
// written, in the order they were made; a refused record holds back every
// decision after it, is said once, and hands the office on once after the
// heartbeat timeout; a write that succeeds again sends them in order.
// Fixed clock, a journal that refuses on demand.
#include <catch2/catch.hpp>

#include "daemon/decision_outbox.h"
#include "daemon/journal.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace std::chrono_literals;

namespace {

struct FakeJournal {
  bool full = false;
  std::vector<nlohmann::json> records;
  int refused = 0;
  DecisionOutbox::Write writer() {
    return [this](const nlohmann::json& r) {
      if (full) {
        ++refused;
        return Status(Err::io, "No space left on device");
      }
      records.push_back(r);
      return Status{};
    };
  }
};

}  // namespace

TEST_CASE("a decision goes out once its record is written, in the order the decisions were made") {
  FakeJournal journal;
  DecisionOutbox outbox(3000ms);
  std::vector<std::string> sent;
  outbox.add(plan_record(7, 0, {"a", "b"}, {1, 1}, {}, 2), "the plan of round 7", [&] {
    REQUIRE(journal.records.size() == 1);  // its record is written before it goes
    sent.push_back("plan 7");
  });
  outbox.add(abort_record(7, "b failed", 2), "the abort of round 7", [&] {
    REQUIRE(journal.records.size() == 2);
    sent.push_back("abort 7");
  });
  const Clock::time_point t0{};
  auto flushed = outbox.flush(t0, journal.writer());
  CHECK(flushed.all_written);
  CHECK(!flushed.written_again);
  CHECK(flushed.notes.empty());
  CHECK(!flushed.hand_on_why);
  CHECK(sent == std::vector<std::string>{"plan 7", "abort 7"});
  CHECK(outbox.empty());
  REQUIRE(journal.records.size() == 2);
  CHECK(journal.records[0]["type"] == "plan");
  CHECK(journal.records[1]["type"] == "abort");
}

TEST_CASE("a refused record holds back every later decision, is said once, and hands the office on once") {
  FakeJournal journal;
  DecisionOutbox outbox(3000ms);
  std::vector<std::string> sent;
  journal.full = true;
  outbox.add(committed_record(6, "00000000000000a6", 640, false, 0, 1), "the commit of round 6",
             [&] { sent.push_back("committed 6"); });
  const Clock::time_point t0{};
  auto flushed = outbox.flush(t0, journal.writer());
  CHECK(!flushed.all_written);
  CHECK(sent.empty());
  REQUIRE(flushed.notes.size() == 1);
  CHECK(flushed.notes[0] ==
        "paused: cannot journal the commit of round 6 (No space left on device); nothing of it is sent, and it is "
        "tried again every second");
  CHECK(!flushed.hand_on_why);
  CHECK(outbox.refused_since() == t0);

  // A later decision waits behind it.
  outbox.add(plan_record(7, 0, {"a", "b"}, {1, 1}, {}, 1), "the plan of round 7", [&] { sent.push_back("plan 7"); });
  flushed = outbox.flush(t0 + 1s, journal.writer());
  CHECK((!flushed.all_written && flushed.notes.empty() && !flushed.hand_on_why));
  CHECK(sent.empty());
  CHECK(outbox.size() == 2);
  CHECK(journal.refused == 2);  // the first record again: the second is not tried before it

  // The heartbeat timeout: leave the office, once.
  flushed = outbox.flush(t0 + 3s, journal.writer());
  REQUIRE(flushed.hand_on_why);
  CHECK(*flushed.hand_on_why == "its journal refused the commit of round 6 for 3 s: No space left on device");
  CHECK(flushed.notes.empty());
  flushed = outbox.flush(t0 + 4s, journal.writer());
  CHECK(!flushed.hand_on_why);
  CHECK(sent.empty());
  CHECK(journal.records.empty());

  // Room again: both go out, in order, and that is said.
  journal.full = false;
  flushed = outbox.flush(t0 + 5s, journal.writer());
  CHECK(flushed.all_written);
  CHECK(flushed.notes ==
        std::vector<std::string>{"the journal is written again after 5 s: the commit of round 6 goes out"});
  CHECK(flushed.written_again);
  CHECK(sent == std::vector<std::string>{"committed 6", "plan 7"});
  CHECK(!outbox.refused_since());

  // A later refusal is a new one: said again, and the office handed on again after its own timeout.
  journal.full = true;
  outbox.add(abort_record(7, "a failed", 1), "the abort of round 7", [&] { sent.push_back("abort 7"); });
  flushed = outbox.flush(t0 + 10s, journal.writer());
  CHECK(flushed.notes.size() == 1);
  CHECK(!flushed.hand_on_why);
  flushed = outbox.flush(t0 + 13s, journal.writer());
  CHECK(flushed.hand_on_why);
}

TEST_CASE("decisions dropped while their records are refused are never sent") {
  FakeJournal journal;
  DecisionOutbox outbox(3000ms);
  int sent = 0;
  journal.full = true;
  outbox.add(plan_record(3, 1, {"a"}, {1}, {}, 0), "the plan of round 3", [&] { ++sent; });
  (void)outbox.flush(Clock::time_point{}, journal.writer());
  outbox.clear();  // the process stood still: what it decided before must not go out after
  journal.full = false;
  const auto flushed = outbox.flush(Clock::time_point{} + 5s, journal.writer());
  CHECK(flushed.all_written);
  CHECK(sent == 0);
  CHECK(journal.records.empty());
}

TEST_CASE("the decisions' records read back as the coordinator's journal summary") {
  std::vector<nlohmann::json> records{
      plan_record(1, 0, {"a", "b"}, {1, 1}, {}, 0), committed_record(1, "00000000000000a1", 640, false, 0, 0),
      plan_record(2, 0, {"a", "b"}, {1, 1}, {}, 0), abort_record(2, "b failed", 0),
      plan_record(2, 1, {"a"}, {1}, {"b"}, 0),      committed_record(2, "00000000000000a2", 960, false, 1, 0),
      plan_record(3, 0, {"a", "b"}, {1, 1}, {}, 0), abort_record(3, "a failed", 0),
      plan_record(3, 1, {"a", "b"}, {1, 1}, {}, 0),
  };
  const JournalSummary s = summarize_journal(records);
  CHECK(s.round == 2);
  CHECK(s.digest == "00000000000000a2");
  CHECK(s.tokens == 960);
  CHECK(!s.final);
  CHECK(s.next_attempt == 2);  // round 3's next plan: past both journaled attempts
  REQUIRE(s.commits.count(2) == 1);
  CHECK(s.commits.at(2).attempt == std::optional<std::uint64_t>(1));
  CHECK(s.commits.at(1).attempt == std::optional<std::uint64_t>(0));
}
