// The round log (round_deltas.h) and the replay on it (round_replay.h): an
// entry read back byte for byte; a damaged, truncated or foreign entry
// refused, never stepped; a checkpoint's state stepped through the logged
// rounds to the live rounds' anchor and momentum bit for bit; a replay that
// stops at a gap, at another outcome, or fails on a damaged step.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/digest.h"
#include "compression/pipeline.h"
#include "daemon/round_deltas.h"
#include "daemon/round_replay.h"
#include "diloco/chunked_step.h"
#include "daemon/tests/round_fixtures.h"

using namespace geoloco;
using namespace geoloco::daemon;
namespace fs = std::filesystem;
using namespace geoloco::daemon::testing;

TEST_CASE("the round log keeps a round's encoded Δ durable and gives it back byte for byte") {
  const fs::path dir = fresh_dir("round-deltas");
  auto log = RoundDeltas::open(dir, "cfg1");
  REQUIRE(log.ok());
  const auto d = encoded_delta(1000, 300, 5, q8_zstd());
  REQUIRE(log->append(7, 2, 40, "00000000deadbeef", d).ok());
  REQUIRE(log->append(9, 0, 0, "0123456789abcdef", encoded_delta(50, 64, 6, q8_zstd())).ok());
  CHECK(log->rounds() == std::vector<std::uint64_t>{7, 9});
  CHECK(log->bytes() > d.bytes());

  auto read = log->read(7);
  REQUIRE(read.ok());
  REQUIRE(read->has_value());
  const RoundDelta& e = **read;
  CHECK(e.round == 7);
  CHECK(e.attempt == 2);
  CHECK(e.offset == 40);
  CHECK(e.digest == "00000000deadbeef");
  CHECK(e.delta.values == 1000);
  REQUIRE(e.delta.chunks.size() == d.chunks.size());
  for (std::size_t i = 0; i < d.chunks.size(); ++i) {
    CHECK(e.delta.ranges[i].begin == d.ranges[i].begin);
    CHECK(e.delta.ranges[i].size == d.ranges[i].size);
    CHECK(e.delta.chunks[i] == d.chunks[i]);
  }
  auto none = log->read(8);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());

  // A later attempt of a round replaces the earlier one's entry.
  REQUIRE(log->append(7, 3, 40, "1111111111111111", d).ok());
  CHECK((*log->read(7))->attempt == 3);

  // A temp file is an append a crash cut short: removed when the log opens.
  std::ofstream(dir / "round-00000000000000000010.delta.tmp") << "half";
  auto reopened = RoundDeltas::open(dir, "cfg1");
  REQUIRE(reopened.ok());
  CHECK_FALSE(fs::exists(dir / "round-00000000000000000010.delta.tmp"));
  CHECK(reopened->rounds() == std::vector<std::uint64_t>{7, 9});

  // A checkpoint of round 7 cuts what it holds.
  REQUIRE(reopened->cut_through(7).ok());
  CHECK(reopened->rounds() == std::vector<std::uint64_t>{9});
  fs::remove_all(dir);
}

TEST_CASE("a damaged, truncated, padded or foreign round log entry is refused, never read as a Δ") {
  const fs::path dir = fresh_dir("round-deltas-damaged");
  auto log = RoundDeltas::open(dir, "cfg1");
  REQUIRE(log.ok());
  const auto d = encoded_delta(600, 256, 9, q8_zstd());
  const fs::path file = dir / "round-00000000000000000004.delta";

  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  flip_byte(file, 3);  // inside the last chunk
  auto flipped = log->read(4);
  REQUIRE_FALSE(flipped.ok());
  CHECK(flipped.status().code() == Err::mismatch);
  CHECK_THAT(flipped.status().message(), Catch::Contains("chunk 2's hash differs"));

  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  fs::resize_file(file, fs::file_size(file) - 10);
  auto cut = log->read(4);
  REQUIRE_FALSE(cut.ok());
  CHECK_THAT(cut.status().message(), Catch::Contains("shorter than its chunks"));

  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  std::ofstream(file, std::ios::app) << "x";
  auto padded = log->read(4);
  REQUIRE_FALSE(padded.ok());
  CHECK_THAT(padded.status().message(), Catch::Contains("1 bytes past its chunks"));

  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  {  // a changed header: its hash no longer matches
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('9');
  }
  auto header = log->read(4);
  REQUIRE_FALSE(header.ok());
  CHECK_THAT(header.status().message(), Catch::Contains("the header's hash differs"));

  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  auto other = RoundDeltas::open(dir, "cfg2");
  REQUIRE(other.ok());
  auto foreign = other->read(4);
  REQUIRE_FALSE(foreign.ok());
  CHECK_THAT(foreign.status().message(), Catch::Contains("another configuration"));
  fs::remove_all(dir);
}

TEST_CASE("an entry whose ranges lie outside its values or the anchor is refused, never stepped (a peer's bytes)") {
  const fs::path dir = fresh_dir("round-bounds");
  auto log = RoundDeltas::open(dir, "cfg");
  REQUIRE(log.ok());
  const auto spec = q8_zstd();
  auto d = encoded_delta(1000, 1000, 3, spec);
  // A chunk that claims more values than the entry has: the header is whole
  // (its hash matches), the ranges are not.
  auto wide = d;
  wide.ranges[0].size = ~std::uint64_t{0} - 5;
  REQUIRE(log->append(2, 0, 0, "aaaaaaaaaaaaaaaa", wide).ok());
  auto read = log->read(2);
  REQUIRE_FALSE(read.ok());
  CHECK_THAT(read.status().message(), Catch::Contains("a chunk reaches past its 1000 values"));
  // An offset that wraps past the end of the anchor.
  outer::OuterState s = initial_state(1000);
  const std::uint64_t before = s.anchor_digest();
  RoundDelta entry{1, 0, ~std::uint64_t{0} - 7, "aaaaaaaaaaaaaaaa", d};
  auto stepped = step_round_delta(s, entry, spec, diloco::OuterOptimizerOptions{});
  REQUIRE_FALSE(stepped.ok());
  CHECK(stepped.status().code() == Err::invalid_argument);
  CHECK(s.anchor_digest() == before);
  fs::remove_all(dir);
}

TEST_CASE("replaying the round log on a checkpoint gives the live rounds' anchor and momentum bit for bit") {
  const fs::path dir = fresh_dir("round-replay");
  auto log = RoundDeltas::open(dir, "cfg");
  REQUIRE(log.ok());
  const auto spec = q8_zstd();
  diloco::OuterOptimizerOptions outer;  // Nesterov, η 0.7, μ 0.9
  outer.clip_norm = 0.2;                // some rounds are clipped

  const std::uint64_t n = 5000;
  outer::OuterState live = initial_state(n);
  std::map<std::uint64_t, JournaledCommit> commits;
  // Rounds 1..2 live, then a "checkpoint" copy at 2, then rounds 3..6, two
  // of them streaming-like fragments (an offset range).
  outer::OuterState checkpoint;
  for (std::uint64_t r = 1; r <= 6; ++r) {
    const std::uint64_t offset = (r == 4 || r == 5) ? 1200 : 0;
    const std::uint64_t values = offset ? 1800 : n;
    const auto d = encoded_delta(values, 700, static_cast<std::uint32_t>(r), spec);
    const std::string digest = live_round(live, d, offset, outer);
    commits[r] = JournaledCommit{digest, 0, r * 100, 0};
    REQUIRE(log->append(r, 0, offset, digest, d).ok());
    if (r == 2) checkpoint = live;
  }
  REQUIRE(checkpoint.round == 2);

  SECTION("through the journal's last round") {
    auto replayed = replay_rounds(checkpoint, *log, commits, 6, spec, outer);
    REQUIRE(replayed.ok());
    CHECK(replayed->from == 2);
    CHECK(replayed->to == 6);
    CHECK(replayed->stopped.empty());
    CHECK(replayed->digest == commits[6].digest);
    CHECK(checkpoint.round == 6);
    CHECK(checkpoint.anchor == live.anchor);
    CHECK(checkpoint.momentum == live.momentum);  // not in the digest: compared value for value
  }
  SECTION("to a round before the last the journal lists") {
    auto replayed = replay_rounds(checkpoint, *log, commits, 4, spec, outer);
    REQUIRE(replayed.ok());
    CHECK(replayed->to == 4);
    CHECK(replayed->digest == commits[4].digest);
  }
  SECTION("a round missing from the log stops the replay on the round before it") {
    REQUIRE(log->cut_through(2).ok());
    fs::remove(dir / "round-00000000000000000005.delta");
    auto replayed = replay_rounds(checkpoint, *log, commits, 6, spec, outer);
    REQUIRE(replayed.ok());
    CHECK(replayed->to == 4);
    CHECK(replayed->digest == commits[4].digest);
    CHECK(digest_hex(checkpoint.anchor_digest()) == commits[4].digest);
    CHECK_THAT(replayed->stopped, Catch::Contains("no Δ of round 5"));
  }
  SECTION("an entry of another outcome than the committed one is not stepped") {
    commits[3].digest = "0000000000000000";
    auto replayed = replay_rounds(checkpoint, *log, commits, 6, spec, outer);
    REQUIRE(replayed.ok());
    CHECK(replayed->to == 2);
    CHECK(checkpoint.round == 2);
    CHECK_THAT(replayed->stopped, Catch::Contains("the committed one is 0000000000000000"));
  }
  SECTION("a round the journal does not list as committed is not stepped") {
    commits.erase(5);
    auto replayed = replay_rounds(checkpoint, *log, commits, 6, spec, outer);
    REQUIRE(replayed.ok());
    CHECK(replayed->to == 4);
    CHECK_THAT(replayed->stopped, Catch::Contains("round 5 is not in the journal"));
  }
  SECTION("a step that does not reach the committed anchor is an error, not a state") {
    // The entry of round 3 says it gives round 3's digest, but holds round 4's Δ.
    auto four = log->read(4);
    REQUIRE(four.ok());
    REQUIRE(log->append(3, 0, (*four)->offset, commits[3].digest, (*four)->delta).ok());
    auto replayed = replay_rounds(checkpoint, *log, commits, 6, spec, outer);
    REQUIRE_FALSE(replayed.ok());
    CHECK(replayed.status().code() == Err::mismatch);
    CHECK_THAT(replayed.status().message(), Catch::Contains("replaying round 3"));
  }
  fs::remove_all(dir);
}
