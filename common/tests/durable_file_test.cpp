// A file written whole or not at all: the bytes read back are the bytes
// given, whatever the sizes of the pieces and of the file (below, at and
// past the direct-write buffer, its tail padded and cut); on ext4 and xfs a
// file of a buffer or more goes past the page cache, all of it; a fill or a
// write that fails leaves the old file as it was and no temp file.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/durable_file.h"

using namespace geoloco;
namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "geoloco-durable-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Writes `content` in pieces of the given sizes, in turn.
Status write_in_pieces(const fs::path& p, const std::string& content, const std::vector<std::size_t>& pieces,
                       DurableWrite* how) {
  return write_file_durably(
      p,
      [&](const FileSink& put) -> Status {
        std::size_t at = 0;
        for (std::size_t i = 0; at < content.size(); ++i) {
          const std::size_t n = std::min(pieces[i % pieces.size()], content.size() - at);
          GEOLOCO_TRY(put(std::as_bytes(std::span(content.data() + at, n))));
          at += n;
        }
        return {};
      },
      how);
}

// ext4 and xfs take O_DIRECT; tmpfs and others may not.
bool takes_direct_writes(const fs::path& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return false;
  return s.f_type == 0xEF53 || s.f_type == 0x58465342;
}
}  // namespace

TEST_CASE("a durable file holds the bytes given, whatever the sizes of the pieces and of the file") {
  TempDir dir;
  const fs::path p = dir.path / "f.bin";
  const bool direct = takes_direct_writes(dir.path);
  const std::size_t chunk = kDirectChunk;
  for (const std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, chunk - 1, chunk, chunk + 1,
                                 chunk + 4096, 3 * chunk + 12345}) {
    for (const auto& pieces : {std::vector<std::size_t>{1 << 20}, std::vector<std::size_t>{8, 1, 4093, (1 << 20) + 3},
                               std::vector<std::size_t>{3 * chunk + 12345}}) {
      const std::string content = random_bytes(size, static_cast<unsigned>(size + pieces.size()));
      DurableWrite how;
      REQUIRE(write_in_pieces(p, content, pieces, &how).ok());
      INFO("size " << size << ", " << pieces.size() << " piece size(s)");
      CHECK(fs::file_size(p) == size);
      CHECK(read(p) == content);
      CHECK_FALSE(fs::exists(p.string() + ".tmp"));
      CHECK(how.bytes == size);
      // A file smaller than one buffer goes through the page cache; a larger
      // one past it from its first byte, its padded tail cut off again.
      if (size < chunk) CHECK(how.direct_bytes == 0);
      else if (direct) CHECK(how.direct_bytes == size);
    }
  }
  if (!direct) WARN("this folder's filesystem is not ext4 or xfs: the direct path's use was not checked");
}

TEST_CASE("a fill or a write that fails leaves the old file as it was and no temp file") {
  TempDir dir;
  const fs::path p = dir.path / "f.bin";
  const std::string old = random_bytes(1000, 1);
  REQUIRE(write_in_pieces(p, old, {1000}, nullptr).ok());
  const std::string big = random_bytes(2 * kDirectChunk + 7, 2);
  SECTION("the fill's own error, past the first direct write") {
    const Status s = write_file_durably(p, [&](const FileSink& put) -> Status {
      GEOLOCO_TRY(put(std::as_bytes(std::span(big))));
      return GEOLOCO_ERROR(Err::mismatch, "the source moved");
    });
    CHECK(s.code() == Err::mismatch);
    CHECK(s.message().find("the source moved") != std::string::npos);
  }
  SECTION("a write refused mid-file (a full disk: the file size limit)") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      rlimit limit{};
      ::getrlimit(RLIMIT_FSIZE, &limit);
      const rlimit small{kDirectChunk + 4096, limit.rlim_max};  // the second direct write is refused
      ::setrlimit(RLIMIT_FSIZE, &small);
      const Status s = write_in_pieces(p, big, {1 << 20}, nullptr);
      ::_exit(!s.ok() && s.code() == Err::io && s.message().find("cannot write") != std::string::npos ? 0 : 1);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(read(p) == old);
  CHECK_FALSE(fs::exists(p.string() + ".tmp"));
}
