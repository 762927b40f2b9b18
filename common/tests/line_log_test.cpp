// The crash-safe line file: lines appended are read back in order; a torn
// last line (no newline) or a line the check refuses ends what is read, and
// the file is cut there so the next append starts on a clean line.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/line_log.h"

using namespace geoloco;
namespace fs = std::filesystem;

namespace {
struct TempFile {
  fs::path path;
  TempFile() {
    std::string t = (fs::temp_directory_path() / "geoloco-line-log-XXXXXX").string();
    const int fd = ::mkstemp(t.data());
    REQUIRE(fd >= 0);
    ::close(fd);
    path = t;
  }
  ~TempFile() { fs::remove(path); }
  std::string content() const {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void write(const std::string& text) const { std::ofstream(path, std::ios::trunc) << text; }
};
const LineLog::LineCheck kAny = [](std::string_view) { return true; };
}  // namespace

TEST_CASE("lines appended to a line log are read back in order, each ending in a newline", "[sanitize]") {
  TempFile f;
  {
    auto log = LineLog::open(f.path.string(), "history", kAny);
    REQUIRE(log.ok());
    CHECK(log->lines().empty());
    REQUIRE(log->append("one").ok());
    REQUIRE(log->append("{\"two\":2}").ok());
    auto refused = log->append("three\nfour");
    CHECK(refused.code() == Err::invalid_argument);
    CHECK(refused.message() == "history " + f.path.string() + ": a line to append holds a newline");
  }
  CHECK(f.content() == "one\n{\"two\":2}\n");
  auto again = LineLog::open(f.path.string(), "history", kAny);
  REQUIRE(again.ok());
  CHECK(again->lines() == std::vector<std::string>{"one", "{\"two\":2}"});
  CHECK(again->dropped_bytes() == 0);
}

TEST_CASE("a torn or refused line ends a line log; the file is cut there", "[sanitize]") {
  TempFile f;
  f.write("good 1\ngood 2\ntorn");
  {
    auto log = LineLog::open(f.path.string(), "history", kAny);
    REQUIRE(log.ok());
    CHECK(log->lines() == std::vector<std::string>{"good 1", "good 2"});
    CHECK(log->dropped_bytes() == 4);
    REQUIRE(log->append("good 3").ok());
  }
  CHECK(f.content() == "good 1\ngood 2\ngood 3\n");

  f.write("good 1\nBAD\ngood 3\n");
  auto checked = LineLog::open(f.path.string(), "history", [](std::string_view l) { return l.rfind("good", 0) == 0; });
  REQUIRE(checked.ok());
  CHECK(checked->lines() == std::vector<std::string>{"good 1"});
  CHECK(checked->dropped_bytes() == 11);
  CHECK(f.content() == "good 1\n");
}

TEST_CASE("a line log that cannot be opened says which and why", "[sanitize]") {
  auto log = LineLog::open("/nonexistent-dir/history.jsonl", "history", kAny);
  REQUIRE_FALSE(log.ok());
  CHECK(log.status().code() == Err::io);
  CHECK(log.status().message() == "cannot open history /nonexistent-dir/history.jsonl: No such file or directory");
}
