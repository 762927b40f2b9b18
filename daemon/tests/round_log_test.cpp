// The round log keeps every field of every committed round across a reopen
// (what a restarted geolocod lists), one record per round in round order,
// and drops a torn or damaged tail.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "daemon/round_log.h"

using namespace geoloco;
using namespace geoloco::daemon;

namespace {

std::string temp_path(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("geoloco-rounds-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove(p);
  return p.string();
}

RoundRecord record_of(std::uint64_t round) {
  RoundRecord r;
  r.round = round;
  r.fragment = static_cast<std::uint32_t>(round % 3);
  r.fragments = 3;
  r.participants = {"site-a", "site-c"};
  r.late = {"site-b"};
  r.loss = 2.5 - 0.125 * static_cast<double>(round);
  r.tokens = 4096 * round;
  r.bytes_sent = 1000 + round;
  r.bytes_received = 2000 + round;
  r.compression_ratio = 7.25;
  r.compute_seconds = 1.5;
  r.waiting_seconds = 0.25;
  r.exchange_seconds = 0.75;
  if (round % 2 == 0) {  // odd rounds: a trainer that does not measure its time
    r.trainer_compute_seconds = 1.125;
    r.trainer_loop_seconds = 1.375;
  }
  r.digest = "00112233445566" + std::to_string(round);
  r.contributed = round != 2;
  return r;
}

std::vector<std::uint64_t> rounds_of(const RoundLog& log) {
  std::vector<std::uint64_t> out;
  for (const auto& r : log.records()) out.push_back(r.round);
  return out;
}

}  // namespace

TEST_CASE("every field of every round survives a reopen") {
  const auto path = temp_path("fields");
  {
    auto log = RoundLog::open(path);
    REQUIRE(log.ok());
    CHECK(log->records().empty());
    for (std::uint64_t r = 1; r <= 4; ++r) REQUIRE(log->append(record_of(r)).ok());
  }
  auto log = RoundLog::open(path);
  REQUIRE(log.ok());
  REQUIRE(log->records().size() == 4);
  for (std::uint64_t r = 1; r <= 4; ++r) {
    const RoundRecord& got = log->records()[r - 1];
    CHECK(stored_record_json(got) == stored_record_json(record_of(r)));
    CHECK(got.trainer_compute_seconds.has_value() == (r % 2 == 0));
    CHECK(got.compute_share() == record_of(r).compute_share());
  }
  CHECK(log->bytes_sent() == 1001 + 1002 + 1003 + 1004);
  CHECK(log->bytes_received() == 2001 + 2002 + 2003 + 2004);
  CHECK(log->dropped_bytes() == 0);
  std::filesystem::remove(path);
}

TEST_CASE("a round committed again replaces the records from that round on") {
  const auto path = temp_path("again");
  {
    auto log = RoundLog::open(path);
    REQUIRE(log.ok());
    for (std::uint64_t r = 1; r <= 3; ++r) REQUIRE(log->append(record_of(r)).ok());
    RoundRecord again = record_of(2);
    again.loss = 9.0;
    REQUIRE(log->append(again).ok());
    CHECK(rounds_of(*log) == std::vector<std::uint64_t>{1, 2});
    CHECK(log->records().back().loss == 9.0);
  }
  auto log = RoundLog::open(path);  // the file holds 1 2 3 2: read as 1 2
  REQUIRE(log.ok());
  CHECK(rounds_of(*log) == std::vector<std::uint64_t>{1, 2});
  CHECK(log->records().back().loss == 9.0);
  CHECK(log->bytes_sent() == 1001 + 1002);
  std::filesystem::remove(path);
}

TEST_CASE("a torn or damaged tail is dropped and appends continue") {
  const auto path = temp_path("torn");
  {
    auto log = RoundLog::open(path);
    REQUIRE(log.ok());
    REQUIRE(log->append(record_of(1)).ok());
    REQUIRE(log->append(record_of(2)).ok());
  }
  const auto whole = std::filesystem::file_size(path);
  {
    std::ofstream out(path, std::ios::app);
    out << hashed_line(stored_record_json(record_of(3)).dump()).substr(0, 40);  // a crash mid-append
  }
  {
    auto log = RoundLog::open(path);
    REQUIRE(log.ok());
    CHECK(rounds_of(*log) == std::vector<std::uint64_t>{1, 2});
    CHECK(log->dropped_bytes() == 40);
    CHECK(std::filesystem::file_size(path) == whole);
    REQUIRE(log->append(record_of(3)).ok());
  }
  {
    // One character of the last line changed: its hash no longer matches.
    std::fstream f(path, std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) - 5));
    f.put('#');
  }
  auto log = RoundLog::open(path);
  REQUIRE(log.ok());
  CHECK(rounds_of(*log) == std::vector<std::uint64_t>{1, 2});
  std::filesystem::remove(path);
}

TEST_CASE("a stored record with a field missing or of the wrong type is refused") {
  const nlohmann::json good = stored_record_json(record_of(2));
  REQUIRE(stored_record(good).has_value());
  for (const auto& [name, value] : good.items()) {
    if (name == "trainer_compute_seconds" || name == "trainer_loop_seconds") continue;  // null: not measured
    nlohmann::json missing = good;
    missing.erase(name);
    CHECK_FALSE(stored_record(missing).has_value());
    nlohmann::json wrong = good;
    wrong[name] = value.is_string() ? nlohmann::json(1) : nlohmann::json("x");
    CHECK_FALSE(stored_record(wrong).has_value());
  }
  nlohmann::json negative = good;
  negative["bytes_sent"] = -1;
  CHECK_FALSE(stored_record(negative).has_value());
}
