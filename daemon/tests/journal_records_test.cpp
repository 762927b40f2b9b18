// The typed journal records: each writer's record has the JSON form the
// journals already on disk hold (so old journals read, and new ones read in
// the versions before), and reads back to the same struct; a field of the
// wrong type is named.
#include <catch2/catch.hpp>

#include "daemon/journal_records.h"

using namespace geoloco;
using namespace geoloco::daemon;
using json = nlohmann::json;

TEST_CASE("each kind of committed record has its JSON form and reads back the same") {
  const CommittedRecord decided{7, "00000000000000a7", 640, false, 3, 1, ""};
  CHECK(to_json(decided) == json{{"type", "committed"},
                                 {"round", 7},
                                 {"anchor_digest", "00000000000000a7"},
                                 {"tokens", 640},
                                 {"final", false},
                                 {"attempt", 3},
                                 {"epoch", 1}});
  const CommittedRecord installed{9, "00000000000000a9", 900, std::nullopt, std::nullopt, std::nullopt, "state_sync"};
  CHECK(to_json(installed) == json{{"type", "committed"},
                                   {"round", 9},
                                   {"anchor_digest", "00000000000000a9"},
                                   {"tokens", 900},
                                   {"via", "state_sync"}});
  const CommittedRecord announced{8, "00000000000000a8", 800, true, std::nullopt, 2, "announced"};
  for (const auto& r : {decided, installed, announced}) {
    auto back = committed_record_of(to_json(r));
    REQUIRE(back.ok());
    CHECK(*back == r);
  }
  // A record of an older version, without the fields it did not write.
  auto old = committed_record_of(json{{"type", "committed"}, {"round", 4}, {"anchor_digest", "00000000000000a4"}});
  REQUIRE(old.ok());
  CHECK(old->tokens == 0);
  CHECK_FALSE(old->attempt);
  CHECK_FALSE(old->final);
}

TEST_CASE("a pending record keeps its plan, and one cleared has only its mark") {
  PendingRecord p{false, PendingCommit{5, 65536, "00000000000000b5", 1280, true}, std::nullopt};
  p.plan = PendingPlan{{"a", "b"}, {"c"}, {640, 640}, {640, 640}, {5, 5}, 1.25, 1, "a"};
  const json j = to_json(p);
  CHECK(j == json{{"type", "pending"},
                  {"round", 5},
                  {"attempt", 65536},
                  {"anchor_digest", "00000000000000b5"},
                  {"tokens", 1280},
                  {"plan",
                   {{"participants", {"a", "b"}},
                    {"late", {"c"}},
                    {"weights", {640.0, 640.0}},
                    {"tokens_each", {640, 640}},
                    {"anchor_rounds", {5, 5}},
                    {"loss", 1.25},
                    {"epoch", 1},
                    {"coordinator", "a"}}}});
  auto back = pending_record_of(j);
  REQUIRE(back.ok());
  CHECK_FALSE(back->cleared);
  CHECK(back->commit.round == 5);
  CHECK(back->commit.attempt == 65536);
  CHECK(back->commit.anchor_digest == "00000000000000b5");
  CHECK(back->commit.tokens == 1280);
  REQUIRE(back->plan);
  CHECK(*back->plan == *p.plan);
  // A plan with a field missing is no plan: the round is then taken from a peer.
  json partial = j;
  partial["plan"].erase("anchor_rounds");
  auto without = pending_record_of(partial);
  REQUIRE(without.ok());
  CHECK_FALSE(without->plan);

  const json cleared = to_json(PendingRecord{true, {}, std::nullopt});
  CHECK(cleared == json{{"type", "pending"}, {"none", true}});
  auto none = pending_record_of(cleared);
  REQUIRE(none.ok());
  CHECK(none->cleared);
}

TEST_CASE("a record of another type, or with a field of the wrong type, is refused by name") {
  CHECK(committed_record_of(json{{"type", "pending"}}).status().message() ==
        "a journal record is not a 'committed' record");
  CHECK(committed_record_of(json::array()).status().message() == "a journal record is array, not an object");
  CHECK(committed_record_of(json{{"type", "committed"}, {"round", -2}}).status().message() ==
        "a 'committed' record's 'round' is number, not an unsigned integer");
  CHECK(committed_record_of(json{{"type", "committed"}, {"round", 2}, {"final", "yes"}}).status().message() ==
        "a 'committed' record's 'final' is string, not true or false");
  CHECK(pending_record_of(json{{"type", "pending"}, {"attempt", "1"}}).status().code() == Err::malformed);
}

TEST_CASE("the coordinator's and the election's records have their JSON form and read back the same") {
  const PlanRecord plan{7, 2, {"site-a", "site-c"}, {0.5, 0.25}, {"site-b"}, 3};
  CHECK(to_json(plan) == json{{"type", "plan"},
                              {"round", 7},
                              {"attempt", 2},
                              {"participants", {"site-a", "site-c"}},
                              {"weights", {0.5, 0.25}},
                              {"late", {"site-b"}},
                              {"epoch", 3}});
  CHECK(plan_record_of(to_json(plan)).value() == plan);
  const AbortRecord abort{7, "site-b failed", 3};
  CHECK(to_json(abort) == json{{"type", "abort"}, {"round", 7}, {"reason", "site-b failed"}, {"epoch", 3}});
  CHECK(abort_record_of(to_json(abort)).value() == abort);
  const Office office{4, "site-b"};
  CHECK(office_record(office) == json{{"type", "office"}, {"epoch", 4}, {"coordinator", "site-b"}});
  CHECK(office_record_of(office_record(office)).value() == office);
  const Office vote{5, "site-c"};
  CHECK(vote_record(vote) == json{{"type", "vote"}, {"epoch", 5}, {"for", "site-c"}});
  CHECK(vote_record_of(vote_record(vote)).value() == vote);
  CHECK(to_json(OfficeStartedRecord{6}) == json{{"type", "office_started"}, {"epoch", 6}});
  CHECK(office_started_record_of(to_json(OfficeStartedRecord{6})).value() == OfficeStartedRecord{6});
  // A plan of an older version, without its epoch: read as epoch 0.
  CHECK(plan_record_of(json{{"type", "plan"}, {"round", 1}, {"attempt", 0}}).value() ==
        PlanRecord{1, 0, {}, {}, {}, 0});
}

TEST_CASE("every record type the journal reads is checked by its codec, and only those") {
  Status check;
  CHECK(!known_record_type("later_version", json{{"type", "later_version"}}, check));
  for (const char* type : {"committed", "pending", "plan", "abort", "office", "vote", "office_started"}) {
    INFO(type);
    CHECK(known_record_type(type, json{{"type", type}}, check));
    CHECK(check.ok());
  }
  CHECK(known_record_type("plan", json{{"type", "plan"}, {"participants", {1, 2}}}, check));
  CHECK(check.message() == "a 'plan' record's 'participants' is array, not an array of strings");
  CHECK(known_record_type("vote", json{{"type", "vote"}, {"for", 3}}, check));
  CHECK(check.message() == "a 'vote' record's 'for' is number, not a string");
  CHECK(known_record_type("abort", json{{"type", "abort"}, {"round", 1.5}}, check));
  CHECK(check.message() == "a 'abort' record's 'round' is number, not an unsigned integer");
  CHECK(known_record_type("pending", json{{"type", "pending"}, {"plan", "x"}}, check));
  CHECK(check.message() == "a 'pending' record's 'plan' is string, not an object");
  CHECK(known_record_type("office_started", json{{"type", "office_started"}, {"epoch", -1}}, check));
  CHECK(check.code() == Err::malformed);
}
