#include <catch2/catch.hpp>

#include "daemon/control_messages.h"

using namespace geoloco;
using namespace geoloco::daemon;

TEST_CASE("every control message round-trips through its JSON", "[sanitize]") {
  const std::vector<ControlMessage> messages{
      JoinMessage{"demo", 4, "00000000deadbeef"},
      HeartbeatMessage{5, "inner"},
      ReadyMessage{5, 5, 12800, 100, 0.75},
      PlanMessage{5, {"a", "b"}, {12800, 6400}, {"c"}, 2, 0.5, 19200, {12800, 6400}, {5, 4}},
      CommitMessage{5, "0123456789abcdef", 3},
      CommittedMessage{5, "0123456789abcdef", true},
      AbortMessage{5, 1, "peer c: no data for 20000 ms"},
      FailedMessage{5, 3, "peer c: no data for 20000 ms"},
      JobStartMessage{"demo", "configs/jobs/demo.yaml", "name: demo\nsites: [a, b]\n"},
      JobCancelMessage{"demo", "cancelled by uid 1000"},
      StateRequestMessage{"demo"},
      StateOfferMessage{"demo", 7, "0123456789abcdef", 101770, 1 << 20, "", {{"w", {100, 1017}}, {"b", {70}}}},
      StateOfferMessage{"demo", 0, "", 0, 0, "no committed state yet", {}},
      StateAcceptMessage{"demo", 7},
      ElectMessage{3, true, 41},
      VoteMessage{3, false, true, "", "",
                  Standing{41, "0123456789abcdef", 52480, false, 2, PendingCommit{42, 196608, "00000000deadbeef", 1280},
                           42, 196608}},
      VoteMessage{2, true, false, "b heard coordinator a 300 ms ago", "a", {}},
      HeartbeatMessage{5, "inner", 3, "b", 4},
      PlanMessage{5, {"a"}, {1}, {}, 196608, 0.5, 10, {10}, {5}, 3},
      StateAcceptMessage{"demo", 7, {3, 5, 6, 10}},
      StateAcceptMessage{"demo", 7, {}, true},
      StateOfferMessage{"demo", 7, "0123456789abcdef", 10, 1 << 20, "", {}, 0, std::nullopt, "fedcba9876543210"},
      RoundQueryMessage{12},
      RoundOutcomeMessage{12, 65537, "0123456789abcdef"},
      StateRequestMessage{"demo", 5, "00000000deadbeef"},
      StateOfferMessage{
          "demo",
          7,
          "0123456789abcdef",
          10,
          1 << 20,
          "",
          {},
          0,
          std::nullopt,
          "",
          5,
          "00000000deadbeef",
          true,
          {{6, 4000, "1111111111111111", "2222222222222222"}, {7, 4100, "3333333333333333", "0123456789abcdef"}}},
      StateOfferMessage{"demo",
                        7,
                        "0123456789abcdef",
                        10,
                        1 << 20,
                        "",
                        {},
                        0,
                        std::nullopt,
                        "",
                        std::nullopt,
                        "",
                        false,
                        {},
                        {{6, 0, {"a", "b"}, {"c"}, 2.5, 12800, "2222222222222222"},
                         {7, 1, {"a"}, {}, 2.25, 6400, "0123456789abcdef"}}},
  };
  for (const auto& m : messages) {
    const std::string text = encode_control(m);
    auto back = decode_control(text);
    INFO(text);
    REQUIRE(back.ok());
    CHECK(back->index() == m.index());
    CHECK(encode_control(*back) == text);
  }
  auto plan = std::get<PlanMessage>(*decode_control(encode_control(messages[3])));
  CHECK(plan.participants == std::vector<std::string>{"a", "b"});
  CHECK(plan.weights == std::vector<double>{12800, 6400});
  CHECK(plan.tokens == 19200);
  CHECK(plan.attempt == 2);
  CHECK(plan.tokens_each == std::vector<std::uint64_t>{12800, 6400});
  CHECK(plan.anchor_rounds == std::vector<std::uint64_t>{5, 4});
  CHECK(std::get<AbortMessage>(*decode_control(encode_control(messages[6]))).attempt == 1);
  CHECK(std::get<CommittedMessage>(*decode_control(encode_control(messages[5]))).final);
  CHECK_FALSE(std::get<CommittedMessage>(*decode_control(encode_control(messages[5]))).attempt);  // not named: unknown
  CHECK(std::get<CommittedMessage>(*decode_control(encode_control(CommittedMessage{5, "0123456789abcdef", false, 2})))
            .attempt == std::optional<std::uint64_t>(2));
  CHECK(std::get<CommitMessage>(*decode_control(encode_control(messages[4]))).attempt == 3);
  auto failed = std::get<FailedMessage>(*decode_control(encode_control(messages[7])));
  CHECK((failed.round == 5 && failed.attempt == 3 && failed.reason == "peer c: no data for 20000 ms"));
  CHECK_FALSE(failed.own);  // not said: a peer's failure, as from a daemon of before the field
  CHECK(std::get<FailedMessage>(*decode_control(encode_control(FailedMessage{5, 3, "disk full", true}))).own);
  auto offer = std::get<StateOfferMessage>(*decode_control(encode_control(messages[11])));
  CHECK(offer.values == 101770);
  CHECK(offer.round == 7);
  CHECK(offer.layout == Layout{{"w", {100, 1017}, 0}, {"b", {70}, 101700}});
  CHECK(std::get<StateAcceptMessage>(*decode_control(encode_control(messages[13]))).round == 7);
  CHECK(std::get<StateAcceptMessage>(*decode_control(encode_control(messages[20]))).stop);
  CHECK(std::get<StateOfferMessage>(*decode_control(encode_control(messages[21]))).momentum_digest ==
        "fedcba9876543210");
  CHECK(std::get<RoundQueryMessage>(*decode_control(encode_control(messages[22]))).round == 12);
  auto outcome = std::get<RoundOutcomeMessage>(*decode_control(encode_control(messages[23])));
  CHECK((outcome.round == 12 && outcome.attempt == 65537 && outcome.anchor_digest == "0123456789abcdef"));
  auto request = std::get<StateRequestMessage>(*decode_control(encode_control(messages[24])));
  CHECK((request.held_round == std::optional<std::uint64_t>(5) && request.held_digest == "00000000deadbeef"));
  CHECK_FALSE(request.listed_round);
  StateRequestMessage listing{"demo", 5, "00000000deadbeef"};
  listing.listed_round = 3;
  CHECK(std::get<StateRequestMessage>(*decode_control(encode_control(listing))).listed_round ==
        std::optional<std::uint64_t>(3));
  CHECK_FALSE(std::get<StateRequestMessage>(*decode_control(encode_control(messages[10]))).held_round);
  auto rounds = std::get<StateOfferMessage>(*decode_control(encode_control(messages[25])));
  CHECK((rounds.base_round == std::optional<std::uint64_t>(5) && rounds.base_digest == "00000000deadbeef" &&
         rounds.from_held));
  REQUIRE(rounds.deltas.size() == 2);
  CHECK(rounds.deltas[1] == StateDeltaOffer{7, 4100, "3333333333333333", "0123456789abcdef"});
  CHECK_FALSE(std::get<StateOfferMessage>(*decode_control(encode_control(messages[11]))).base_round);
  // "You hold it": from the asker's own state, with no entries.
  StateOfferMessage held{"demo", 7, "0123456789abcdef", 101770, 4096, "", {}};
  held.base_round = 7;
  held.base_digest = "0123456789abcdef";
  held.from_held = true;
  auto current = std::get<StateOfferMessage>(*decode_control(encode_control(held)));
  CHECK((current.from_held && current.base_round == std::optional<std::uint64_t>(7) && current.deltas.empty() &&
         current.base_digest == "0123456789abcdef"));
  auto listed = std::get<StateOfferMessage>(*decode_control(encode_control(messages[26]))).rounds;
  REQUIRE(listed.size() == 2);
  CHECK(listed[0] == OfferedRound{6, 0, {"a", "b"}, {"c"}, 2.5, 12800, "2222222222222222"});
  CHECK(listed[1] == OfferedRound{7, 1, {"a"}, {}, 2.25, 6400, "0123456789abcdef"});
  CHECK(std::get<StateOfferMessage>(*decode_control(encode_control(messages[11]))).rounds.empty());
  auto elect = std::get<ElectMessage>(*decode_control(encode_control(messages[14])));
  CHECK((elect.epoch == 3 && elect.pre && elect.committed_round == 41));
  auto vote = std::get<VoteMessage>(*decode_control(encode_control(messages[15])));
  CHECK((vote.epoch == 3 && vote.granted && !vote.pre));
  CHECK((vote.standing.committed_round == 41 && vote.standing.tokens == 52480 &&
         vote.standing.committed_attempt == std::optional<std::uint64_t>(2)));
  REQUIRE(vote.standing.pending);
  CHECK((vote.standing.pending->round == 42 && vote.standing.pending->attempt == 196608 &&
         vote.standing.pending->anchor_digest == "00000000deadbeef" && vote.standing.pending->tokens == 1280));
  CHECK((vote.standing.newest_round == 42 && vote.standing.newest_attempt == 196608));
  auto refused = std::get<VoteMessage>(*decode_control(encode_control(messages[16])));
  CHECK((!refused.granted && refused.reason == "b heard coordinator a 300 ms ago" && refused.coordinator == "a"));
  auto beat = std::get<HeartbeatMessage>(*decode_control(encode_control(messages[17])));
  CHECK((beat.epoch == 3 && beat.coordinator == "b" && beat.committed == 4));
  CHECK(std::get<PlanMessage>(*decode_control(encode_control(messages[18]))).epoch == 3);
  CHECK(std::get<StateAcceptMessage>(*decode_control(encode_control(messages[19]))).missing ==
        std::vector<std::uint64_t>{3, 5, 6, 10});
  // A message of a peer from before epochs: epoch 0.
  CHECK(std::get<HeartbeatMessage>(*decode_control(R"({"type":"heartbeat","round":3,"phase":"idle"})")).epoch == 0);

  // Who each is for: the first five go to the coordinator, the rest to a site.
  std::vector<std::string> to_coordinator;
  for (const auto& m : messages)
    if (for_coordinator(m)) to_coordinator.emplace_back(control_type_name(m));
  CHECK(to_coordinator == std::vector<std::string>{"join", "heartbeat", "ready", "commit", "failed", "heartbeat"});
  // Once the job has ended on the coordinator's site, a COMMIT alone is still answered.
  std::vector<std::string> after_end;
  for (const auto& m : messages)
    if (for_coordinator_after_end(m)) after_end.emplace_back(control_type_name(m));
  CHECK(after_end == std::vector<std::string>{"commit"});
}

TEST_CASE("malformed control messages are refused naming the field", "[sanitize]") {
  auto msg = [](const std::string& text) { return decode_control(text).status().message(); };
  CHECK(msg("not json") == "control message is not a JSON object");
  CHECK(msg("{}") == "control message has no type");
  CHECK(msg(R"({"type":"gossip"})") == "unknown control message type 'gossip'");
  CHECK(msg(R"({"type":"failed","round":3,"reason":"x"})") == "failed message: field 'attempt' must be present");
  CHECK(msg(R"({"type":"ready","round":3,"anchor_round":3,"tokens":-5,"inner_steps":1,"loss":0.1})") ==
        "ready message: field 'tokens' must be a non-negative integer");
  CHECK(msg(R"({"type":"ready","round":3,"anchor_round":4,"tokens":5,"inner_steps":1,"loss":0.1})") ==
        "ready message: anchor_round must be between 1 and round (equal when on time)");
  CHECK(
      msg(R"({"type":"plan","round":3,"participants":["a","b"],"weights":[1],"late":[],"tokens_each":[1,1],"anchor_rounds":[3,3]})") ==
      "plan message: one weight per participant");
  CHECK(
      msg(R"({"type":"plan","round":3,"participants":["a"],"weights":[0],"late":[],"tokens_each":[1],"anchor_rounds":[3]})") ==
      "plan message: weights must be > 0");
  CHECK(msg(R"({"type":"plan","round":3,"participants":["a"],"weights":[1],"late":[]})") ==
        "plan message: field 'tokens_each' must be present");
  CHECK(
      msg(R"({"type":"plan","round":3,"participants":["a"],"weights":[1],"late":[],"tokens_each":[1,2],"anchor_rounds":[3]})") ==
      "plan message: one tokens_each per participant");
  CHECK(
      msg(R"({"type":"plan","round":3,"participants":["a"],"weights":[1],"late":[],"tokens_each":[-1],"anchor_rounds":[3]})") ==
      "plan message: field 'tokens_each' must be a list of non-negative integers");
  CHECK(
      msg(R"({"type":"plan","round":3,"participants":["a"],"weights":[1],"late":[],"tokens_each":[1],"anchor_rounds":[4]})") ==
      "plan message: anchor_rounds must be between 1 and round");
  CHECK(msg(R"({"type":"abort","round":3,"reason":"x"})") == "abort message: field 'attempt' must be present");
  CHECK(msg(R"({"type":"commit","round":3,"anchor_digest":"xyz"})") ==
        "commit message: anchor_digest must be 16 hex digits");
  CHECK(msg(R"({"type":"heartbeat","round":3})") == "heartbeat message: field 'phase' must be present");
  CHECK(msg(R"({"type":"round_query","round":0})") == "round_query message: round must be 1 or more");
  CHECK(msg(R"({"type":"round_outcome","round":3,"anchor_digest":"0123456789abcdef"})") ==
        "round_outcome message: field 'attempt' must be present");
  CHECK(msg(R"({"type":"round_outcome","round":3,"attempt":1,"anchor_digest":"xyz"})") ==
        "round_outcome message: anchor_digest must be 16 hex digits");
  CHECK(msg(R"({"type":"elect","epoch":0,"committed_round":1})") == "elect message: epoch must be 1..65535");
  CHECK(msg(R"({"type":"state_accept","job":"x","round":3,"missing":[4,2]})") ==
        "state_accept message: missing must be ordered, non-empty [begin, end) ranges");
  CHECK(msg(R"({"type":"state_accept","job":"x","round":3,"missing":[4]})") ==
        "state_accept message: missing must be [begin, end) pairs");
  CHECK(msg(R"({"type":"state_accept","job":"x","round":3,"missing":[2,4],"stop":true})") ==
        "state_accept message: a stop names no frames");
  CHECK(msg(R"({"type":"elect","epoch":70000,"committed_round":1})") == "elect message: epoch must be 1..65535");
  CHECK(msg(R"({"type":"vote","epoch":2,"reason":""})") == "vote message: field 'standing' must be an object");
  CHECK(msg(R"({"type":"vote","epoch":2,"reason":"","standing":{"committed_round":3,"anchor_digest":"x"}})") ==
        "vote standing message: anchor_digest must be 16 hex digits");
  CHECK(
      msg(R"({"type":"vote","epoch":2,"reason":"","standing":{"committed_round":0,"anchor_digest":"","pending":{"round":1,"attempt":4294967296,"anchor_digest":"0123456789abcdef"}}})") ==
      "vote pending message: attempt must be < 2^32");
  CHECK(
      msg(R"({"type":"plan","round":3,"participants":["a"],"weights":[1],"late":[],"tokens_each":[1],"anchor_rounds":[3],"attempt":4294967296})") ==
      "plan message: attempt must be < 2^32");
  CHECK(msg(R"({"type":"committed","round":3,"anchor_digest":"0123456789abcdef","epoch":65536})") ==
        "committed message: epoch must be < 65536");
  CHECK(msg(R"({"type":"join","job":"x","last_committed_round":2,"anchor_digest":""})") ==
        "join message: a committed round needs its anchor_digest");
  CHECK(msg(R"({"type":"committed","round":3,"anchor_digest":"0123456789abcdef","final":1})") ==
        "committed message: field 'final' must be true or false");
  CHECK(
      msg(R"({"type":"state_offer","job":"x","round":3,"anchor_digest":"0123456789abcdef","values":0,"chunk_values":4096,"reason":""})") ==
      "state_offer message: values must be 1..2^36");
  const std::string offer =
      R"({"type":"state_offer","job":"x","round":3,"anchor_digest":"0123456789abcdef","values":10,"chunk_values":4096,"reason":"","layout":)";
  CHECK(msg(offer + R"([{"name":"w","shape":[3,3]}]})") ==
        "state_offer message: field 'layout' must be tensors that add up to the offer's 10 values");
  CHECK(msg(offer + R"([{"name":"w","shape":[5,0]}]})") ==
        "state_offer message: field 'layout' must be shapes of dimensions 1..2^36");
  CHECK(msg(offer + R"([{"name":"","shape":[10]}]})") ==
        "state_offer message: field 'layout' must be a list of {name, shape} with shapes of rank 8 at most");
  CHECK(msg(offer + R"([{"name":"w","shape":[65536,2097152]}]})") ==
        "state_offer message: field 'layout' must be tensors of at most 2^36 values");
  CHECK(msg(offer + R"([{"name":"w","shape":[5]},{"name":"w","shape":[5]}]})") ==
        "state_offer message: field 'layout' must be a valid layout (tensor name 'w' appears twice)");
  CHECK(
      decode_control(offer + R"([{"name":"w","shape":[2,4]},{"name":"s","shape":[]},{"name":"b","shape":[1]}]})").ok());
  // Rounds after the state: the rounds between the base and the offer's, in order, the last giving its anchor.
  const std::string base =
      R"({"type":"state_offer","job":"x","round":3,"anchor_digest":"0123456789abcdef","values":10,"chunk_values":4096,"reason":"","base_round":1,"base_digest":"00000000deadbeef","deltas":)";
  const std::string two =
      R"([[2,10,"1111111111111111","2222222222222222"],[3,10,"1111111111111111","0123456789abcdef"]])";
  CHECK(decode_control(base + two + "}").ok());
  CHECK(msg(base + R"([[2,10,"1111111111111111","2222222222222222"]]})") ==
        "state_offer message: deltas must be the rounds base_round + 1 .. round, in order");
  CHECK(msg(base + R"([[3,10,"1111111111111111","2222222222222222"],[2,10,"1111111111111111","0123456789abcdef"]]})") ==
        "state_offer message: deltas must be the rounds base_round + 1 .. round, in order");
  CHECK(msg(base + R"([[2,10,"1111111111111111","2222222222222222"],[3,10,"1111111111111111","2222222222222222"]]})") ==
        "state_offer message: the last delta's digest must be anchor_digest");
  CHECK(msg(base + R"([[2,0,"1111111111111111","2222222222222222"],[3,10,"1111111111111111","0123456789abcdef"]]})") ==
        "state_offer message: a delta's bytes must be 1..2^40");
  CHECK(msg(base + R"([[2,10,"x","2222222222222222"],[3,10,"1111111111111111","0123456789abcdef"]]})") ==
        "state_offer message: a delta's hash and digest must be 16 hex digits");
  CHECK(msg(base + R"([2,3]})") == "state_offer message: each of deltas must be [round, bytes, hash, digest]");
  const std::string listing =
      R"({"type":"state_offer","job":"x","round":3,"anchor_digest":"0123456789abcdef","values":10,"chunk_values":4096,"reason":"","rounds":)";
  const std::string entry = R"({"fragment":0,"participants":["a"],"late":[],"loss":1.5,"tokens":10,)";
  CHECK(msg(listing + "[" + entry + R"("round":2,"digest":"0123456789abcdef"},)" + entry +
            R"("round":2,"digest":"0123456789abcdef"}]})") ==
        "state_offer (an entry of rounds) message: rounds must be listed in order, once each");
  CHECK(msg(listing + "[" + entry + R"("round":4,"digest":"0123456789abcdef"}]})") ==
        "state_offer (an entry of rounds) message: a listed round must be 1..round");
  CHECK(msg(listing + "[" + entry + R"("round":3,"digest":"x"}]})") ==
        "state_offer (an entry of rounds) message: digest must be 16 hex digits");
  CHECK(msg(listing + "[" + entry + R"("round":3}]})") ==
        "state_offer (an entry of rounds) message: field 'digest' must be present");
  CHECK(msg(listing + R"({}})") == "state_offer message: rounds must be a list of at most 256 records");
  CHECK(msg(listing + "[3]}") == "state_offer message: each of rounds must be an object");
  CHECK(
      msg(R"({"type":"state_offer","job":"x","round":3,"anchor_digest":"0123456789abcdef","values":10,"chunk_values":4096,"reason":"","from_held":true})") ==
      "state_offer message: an offer with deltas names its base_round");
  CHECK(
      msg(R"({"type":"state_offer","job":"x","round":3,"anchor_digest":"0123456789abcdef","values":10,"chunk_values":4096,"reason":"","from_held":true,"base_round":3,"base_digest":"00000000deadbeef"})") ==
      "state_offer message: from_held without deltas must name the anchor_digest as its base_digest");
  CHECK(
      msg(R"({"type":"state_offer","job":"x","round":3,"anchor_digest":"0123456789abcdef","values":10,"chunk_values":4096,"reason":"","from_held":true,"base_round":2,"base_digest":"00000000deadbeef"})") ==
      "state_offer message: deltas must be the rounds base_round + 1 .. round, in order");
  CHECK(msg(R"({"type":"state_request","job":"x","held_round":4,"held_digest":"nope"})") ==
        "state_request message: held_digest must be 16 hex digits");
  CHECK(msg(R"({"type":"job_start","job":"","file":"j.yaml","yaml":""})") ==
        "job_start message: job must name the job");
  CHECK(decode_control(std::string(2 << 20, ' ')).status().code() == Err::too_large);
}
