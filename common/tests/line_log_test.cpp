// The crash-safe line file: lines appended are read back in order; a torn
// last line (no newline) or a line the check refuses ends what is read, and
// the file is cut there so the next append starts on a clean line.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

TEST_CASE("a write cut short (a full disk) is undone: no half line for the next to glue to", "[sanitize]") {
  TempFile f;
  // A child whose files may not grow more than a few bytes past the first
  // line: the second append is cut short, as on a full disk, then the limit
  // is lifted and the third append goes through.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    auto log = LineLog::open(f.path.string(), "history", [](std::string_view) { return true; });
    if (!log.ok() || !log->append("one").ok()) ::_exit(10);
    rlimit limit{};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    const rlimit small{10, limit.rlim_max};
    ::setrlimit(RLIMIT_FSIZE, &small);
    const Status cut = log->append(std::string(100, 'x'));
    if (cut.ok() || cut.message().find("write failed") == std::string::npos) ::_exit(11);
    ::setrlimit(RLIMIT_FSIZE, &limit);
    if (!log->append("three").ok()) ::_exit(12);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(f.content() == "one\nthree\n");
}
