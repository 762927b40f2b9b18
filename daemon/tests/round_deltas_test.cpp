// The round log (round_deltas.h) and the replay on it (round_replay.h): an
// entry read back byte for byte; a damaged, truncated or foreign entry
// refused, never stepped; a checkpoint's state stepped through the logged
// rounds to the live rounds' anchor and momentum bit for bit; a replay that
// stops at a gap, at another outcome, or fails on a damaged step.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
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

  const std::uint64_t last_line = kEntryLastLine;
  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  flip_byte(file, last_line + 3);  // inside the last chunk
  auto flipped = log->read(4);
  REQUIRE_FALSE(flipped.ok());
  CHECK(flipped.status().code() == Err::mismatch);
  CHECK_THAT(flipped.status().message(), Catch::Contains("chunk 2's hash differs"));

  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  fs::resize_file(file, fs::file_size(file) - last_line - 10);
  auto cut = log->read(4);
  REQUIRE_FALSE(cut.ok());
  CHECK_THAT(cut.status().message(), Catch::Contains("shorter than its chunks"));

  // The digest's last line: changed, cut, or missing.
  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  flip_byte(file, 40);  // inside the digest
  for (auto damaged : {log->read(4).status(), log->header(4).status()}) {
    CHECK(damaged.code() == Err::mismatch);
    CHECK_THAT(damaged.message(), Catch::Contains("the last line's hash differs"));
  }
  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  fs::resize_file(file, fs::file_size(file) - 1);  // no newline at the end
  CHECK_THAT(log->read(4).status().message(), Catch::Contains("not its last line"));
  CHECK_THAT(log->header(4).status().message(), Catch::Contains("no complete last line"));
  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  fs::resize_file(file, fs::file_size(file) - last_line);  // the chunks, and nothing after them
  CHECK_THAT(log->read(4).status().message(), Catch::Contains("0 bytes past its chunks, not its last line"));

  REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
  std::ofstream(file, std::ios::app) << "x";
  auto padded = log->read(4);
  REQUIRE_FALSE(padded.ok());
  CHECK_THAT(padded.status().message(), Catch::Contains("76 bytes past its chunks, not its last line"));

  // Another entry's last line, whole and hashed, spliced onto this one.
  REQUIRE(log->append(5, 0, 0, "bbbbbbbbbbbbbbbb", encoded_delta(60, 64, 2, q8_zstd())).ok());
  {
    std::ifstream other(dir / "round-00000000000000000005.delta", std::ios::binary);
    const std::string o((std::istreambuf_iterator<char>(other)), std::istreambuf_iterator<char>());
    REQUIRE(log->append(4, 0, 0, "aaaaaaaaaaaaaaaa", d).ok());
    fs::resize_file(file, fs::file_size(file) - last_line);
    std::ofstream(file, std::ios::app | std::ios::binary) << o.substr(o.size() - last_line);
  }
  CHECK_THAT(log->read(4).status().message(), Catch::Contains("the last line is another entry's"));

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

TEST_CASE("an entry's digest may come after its chunks are written; one that fails leaves no entry") {
  const fs::path dir = fresh_dir("round-deltas-late-digest");
  auto log = RoundDeltas::open(dir, "cfg1");
  REQUIRE(log.ok());
  const auto d = encoded_delta(800, 200, 3, q8_zstd());
  // The digest is asked for once, after every chunk was put.
  int asked = 0;
  REQUIRE(log->append(
                 3, 1, 0, [&] { return ++asked, Result<std::string>(std::string("0123456789abcdef")); }, d)
              .ok());
  CHECK(asked == 1);
  auto read = log->read(3);
  REQUIRE(read.ok());
  CHECK((*read)->digest == "0123456789abcdef");
  auto header = log->header(3);
  REQUIRE(header.ok());
  CHECK((*header)->digest == "0123456789abcdef");
  CHECK((*header)->attempt == 1);
  CHECK((*header)->bytes == fs::file_size(log->file(3)));
  // A failed digest: no entry, and the earlier attempt's is left as it was.
  auto no_digest = [] { return Result<std::string>(Status(Err::non_finite, "the step met a NaN")); };
  CHECK(log->append(3, 2, 0, no_digest, d).code() == Err::non_finite);
  CHECK((*log->read(3))->attempt == 1);
  CHECK_FALSE(fs::exists(log->file(3).string() + ".tmp"));
  CHECK(log->append(4, 0, 0, no_digest, d).code() == Err::non_finite);
  CHECK(log->rounds() == std::vector<std::uint64_t>{3});
  fs::remove_all(dir);
}

TEST_CASE("a format 1 entry (the digest in its first line, no last line) is still read") {
  const fs::path dir = fresh_dir("round-deltas-format1");
  auto log = RoundDeltas::open(dir, "cfg1");
  REQUIRE(log.ok());
  const auto d = encoded_delta(500, 128, 4, q8_zstd());
  // Written as the daemon wrote it before format 2.
  nlohmann::json chunks = nlohmann::json::array();
  for (std::size_t i = 0; i < d.chunks.size(); ++i)
    chunks.push_back(nlohmann::json::array({d.ranges[i].begin, d.ranges[i].size, d.chunks[i].size(),
                                            digest_hex(xxh3_64(std::span<const std::byte>(d.chunks[i])))}));
  const std::string text = nlohmann::json{
      {"format", 1},
      {"config", "cfg1"},
      {"round", 6},
      {"attempt", 0},
      {"offset", 0},
      {"values", d.values},
      {"digest", "fedcba9876543210"},
      {"chunks", chunks}}.dump();
  {
    std::ofstream f(log->file(6), std::ios::binary);
    f << digest_hex(xxh3_64(std::as_bytes(std::span(text)))) << " " << text << "\n";
    for (const auto& c : d.chunks)
      f.write(reinterpret_cast<const char*>(c.data()), static_cast<std::streamsize>(c.size()));
  }
  auto read = log->read(6);
  REQUIRE(read.ok());
  CHECK((*read)->digest == "fedcba9876543210");
  REQUIRE((*read)->delta.chunks.size() == d.chunks.size());
  CHECK((*read)->delta.chunks.back() == d.chunks.back());
  auto header = log->header(6);
  REQUIRE(header.ok());
  CHECK((*header)->digest == "fedcba9876543210");
  // Bytes past the chunks are damage in format 1: there is no last line.
  std::ofstream(log->file(6), std::ios::app) << "x";
  CHECK_THAT(log->read(6).status().message(), Catch::Contains("1 bytes past its chunks"));
  fs::remove_all(dir);
}
