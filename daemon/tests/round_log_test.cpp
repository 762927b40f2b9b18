// The round log keeps every field of every committed round across a reopen
// (what a restarted geolocod lists), one record per round in round order,
// and drops a torn or damaged tail.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "daemon/round_log.h"

using namespace geoloco;
using namespace geoloco::daemon;

namespace {

const std::string kConfig = "cfg-1";

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
    auto log = RoundLog::open(path, kConfig);
    REQUIRE(log.ok());
    CHECK(log->records().empty());
    for (std::uint64_t r = 1; r <= 4; ++r) REQUIRE(log->append(record_of(r)).ok());
  }
  auto log = RoundLog::open(path, kConfig);
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

TEST_CASE("rounds installed from a peer's state are written at once and say from whom") {
  const auto path = temp_path("installed");
  {
    auto log = RoundLog::open(path, kConfig);
    REQUIRE(log.ok());
    REQUIRE(log->append(record_of(1)).ok());
    std::vector<RoundRecord> installed{record_of(2), record_of(3), record_of(4)};
    for (auto& r : installed) r.installed_from = "site-b";
    REQUIRE(log->append(std::span<const RoundRecord>(installed)).ok());
    CHECK(rounds_of(*log) == std::vector<std::uint64_t>{1, 2, 3, 4});
  }
  auto log = RoundLog::open(path, kConfig);
  REQUIRE(log.ok());
  REQUIRE(rounds_of(*log) == std::vector<std::uint64_t>{1, 2, 3, 4});
  CHECK(log->records()[0].installed_from.empty());
  CHECK_FALSE(stored_record_json(log->records()[0]).contains("installed_from"));
  for (std::size_t i = 1; i < 4; ++i) {
    CHECK(log->records()[i].installed_from == "site-b");
    CHECK(stored_record_json(log->records()[i])["installed_from"] == "site-b");
  }
  std::filesystem::remove(path);
}

TEST_CASE("a round committed again replaces the records from that round on") {
  const auto path = temp_path("again");
  {
    auto log = RoundLog::open(path, kConfig);
    REQUIRE(log.ok());
    for (std::uint64_t r = 1; r <= 3; ++r) REQUIRE(log->append(record_of(r)).ok());
    RoundRecord again = record_of(2);
    again.loss = 9.0;
    REQUIRE(log->append(again).ok());
    CHECK(rounds_of(*log) == std::vector<std::uint64_t>{1, 2});
    CHECK(log->records().back().loss == 9.0);
  }
  auto log = RoundLog::open(path, kConfig);  // the file holds 1 2 3 2: read as 1 2
  REQUIRE(log.ok());
  CHECK(rounds_of(*log) == std::vector<std::uint64_t>{1, 2});
  CHECK(log->records().back().loss == 9.0);
  CHECK(log->bytes_sent() == 1001 + 1002);
  std::filesystem::remove(path);
}

TEST_CASE("a torn or damaged tail is dropped and appends continue") {
  const auto path = temp_path("torn");
  {
    auto log = RoundLog::open(path, kConfig);
    REQUIRE(log.ok());
    REQUIRE(log->append(record_of(1)).ok());
    REQUIRE(log->append(record_of(2)).ok());
  }
  const auto whole = std::filesystem::file_size(path);
  {
    std::ofstream out(path, std::ios::app);
    nlohmann::json line = stored_record_json(record_of(3));
    line["config"] = kConfig;
    out << hashed_line(line.dump()).substr(0, 40);  // a crash mid-append
  }
  {
    auto log = RoundLog::open(path, kConfig);
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
  auto log = RoundLog::open(path, kConfig);
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
  nlohmann::json wide = good;
  wide["fragments"] = std::uint64_t{1} << 32;  // not a uint32: refused, not truncated to 0
  CHECK_FALSE(stored_record(wide).has_value());
}

TEST_CASE("a loss that is not finite is kept (as JSON null) and lists as NaN") {
  const auto path = temp_path("nan");
  {
    auto log = RoundLog::open(path, kConfig);
    REQUIRE(log.ok());
    RoundRecord r = record_of(1);
    r.loss = std::numeric_limits<double>::quiet_NaN();
    REQUIRE(log->append(r).ok());
    REQUIRE(log->append(record_of(2)).ok());
  }
  auto log = RoundLog::open(path, kConfig);
  REQUIRE(log.ok());
  REQUIRE(rounds_of(*log) == std::vector<std::uint64_t>{1, 2});
  CHECK(std::isnan(log->records()[0].loss));
  CHECK(log->records()[1].loss == record_of(2).loss);
  std::filesystem::remove(path);
}

TEST_CASE("lines of another configuration, or that this version cannot read, are skipped, not the file cut") {
  const auto path = temp_path("other");
  {
    auto old = RoundLog::open(path, "cfg-old");
    REQUIRE(old.ok());
    REQUIRE(old->append(record_of(1)).ok());
    REQUIRE(old->append(record_of(2)).ok());
  }
  {
    std::ofstream out(path, std::ios::app);
    nlohmann::json unknown = stored_record_json(record_of(3));
    unknown.erase("loss");  // a whole line, its hash right, of a format this version does not read
    unknown["config"] = kConfig;
    out << hashed_line(unknown.dump()) << "\n";
  }
  {
    auto log = RoundLog::open(path, kConfig);
    REQUIRE(log.ok());
    CHECK(log->records().empty());  // the old job's rounds are not this job's
    CHECK(log->skipped_lines() == 3);
    REQUIRE(log->append(record_of(4)).ok());
  }
  auto log = RoundLog::open(path, kConfig);
  REQUIRE(log.ok());
  CHECK(rounds_of(*log) == std::vector<std::uint64_t>{4});  // read past the skipped lines
  CHECK(log->dropped_bytes() == 0);
  auto old = RoundLog::open(path, "cfg-old");
  REQUIRE(old.ok());
  CHECK(rounds_of(*old) == std::vector<std::uint64_t>{1, 2});
  std::filesystem::remove(path);
}

TEST_CASE("a record whose write fails waits and is written, in order, before the next one") {
  const auto path = temp_path("full");
  auto log = RoundLog::open(path, kConfig);
  REQUIRE(log.ok());
  REQUIRE(log->append(record_of(1)).ok());
  const auto one_line = std::filesystem::file_size(path);
  // A child whose files may not grow past the first line: the next two
  // appends fail (EFBIG, as ENOSPC would on a full disk).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{};
    if (::getrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(3);
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = one_line + 10;  // the soft limit: raised again below without privilege
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(3);
    if (log->append(record_of(2)).ok() || log->append(record_of(3)).ok()) ::_exit(4);
    if (log->records().size() != 3 || log->unwritten() != 2) ::_exit(5);  // listed meanwhile
    limit.rlim_cur = before;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(6);
    if (!log->append(record_of(4)).ok() || log->unwritten() != 0) ::_exit(7);  // room again: 2, 3, then 4
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  auto reread = RoundLog::open(path, kConfig);
  REQUIRE(reread.ok());
  CHECK(rounds_of(*reread) == std::vector<std::uint64_t>{1, 2, 3, 4});
  std::filesystem::remove(path);
}

TEST_CASE("a round's costs are listed with its record and not kept on disk") {
  const std::string path = temp_path("costs");
  {
    auto log = RoundLog::open(path, kConfig);
    REQUIRE(log.ok());
    REQUIRE(log->append(record_of(1)).ok());
    REQUIRE(log->append(record_of(2)).ok());
    RoundCosts c;
    c.encode = 0.5;
    c.values = 10;
    CHECK(log->set_costs(1, c));
    CHECK_FALSE(log->set_costs(3, c));  // no record of round 3
    REQUIRE(log->records()[0].costs);
    CHECK(log->records()[0].costs->encode == 0.5);
    CHECK_FALSE(log->records()[1].costs);
  }
  auto reopened = RoundLog::open(path, kConfig);
  REQUIRE(reopened.ok());
  REQUIRE(reopened->records().size() == 2);
  CHECK_FALSE(reopened->records()[0].costs);  // the process that ran the round measured them
  std::filesystem::remove(path);
}
