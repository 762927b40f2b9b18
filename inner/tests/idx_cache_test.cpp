// The cache of decompressed IDX files: a second load reads the cache and
// returns the same array; a cache that no longer matches its source (another
// file, a corrupted or torn cache file) is never used; a folder that cannot
// be written costs the cache, never the load (run under ASan+UBSan too: a
// cache file is read from disk like the source).
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "inner/data/fashion_mnist.h"
#include "inner/data/idx_cache.h"
#include "inner/tests/idx_files.h"

using namespace geoloco;
using namespace geoloco::inner;
using namespace geoloco::inner::testing;

namespace {

Bytes read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const Bytes& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// The array's bytes as the source holds them, header excluded.
Bytes elements(const Bytes& idx, std::size_t rank) { return Bytes(idx.begin() + 4 + 4 * rank, idx.end()); }

}  // namespace

TEST_CASE("a second load reads the cache and gets the same array", "[idx][cache]") {
  IdxDir dir;
  const Bytes raw = idx_bytes({4, 3, 2}, 11);
  const std::string src = dir.write("images-idx3-ubyte.gz", gzip(raw));
  const std::string cache = (dir.path / "cache").string();

  auto first = read_idx_gz_cached(src, 3, cache);
  REQUIRE(first.ok());
  CHECK(first->source == "decompressed");
  const std::string file = idx_cache_path(src, cache);
  CHECK(std::filesystem::path(file).filename().string().starts_with("images-idx3-ubyte-"));
  REQUIRE(std::filesystem::exists(file));
  CHECK(std::filesystem::file_size(file) == 40 + raw.size());  // the header, then the decompressed file

  auto second = read_idx_gz_cached(src, 3, cache);
  REQUIRE(second.ok());
  CHECK(second->source == "from the cache");
  CHECK(second->array.dims == std::vector<std::size_t>{4, 3, 2});
  CHECK(second->array.data == elements(raw, 3));
  CHECK(second->array.data == first->array.data);

  // Nothing but the cache file is left in the folder (no temporary file).
  CHECK(std::distance(std::filesystem::directory_iterator(cache), std::filesystem::directory_iterator{}) == 1);
}

TEST_CASE("a cache file that does not match its source or its digest is not used", "[idx][cache]") {
  IdxDir dir;
  const Bytes raw = idx_bytes({6, 2, 2}, 3);
  const std::string src = dir.write("x-idx3-ubyte.gz", gzip(raw));
  const std::string cache = (dir.path / "cache").string();
  REQUIRE(read_idx_gz_cached(src, 3, cache).ok());
  const std::string file = idx_cache_path(src, cache);
  const Bytes good = read_all(file);

  SECTION("one element flipped in the cache file: the digest differs, the source is read again") {
    Bytes bad = good;
    bad.back() ^= 0x01;
    write_all(file, bad);
    auto a = read_idx_gz_cached(src, 3, cache);
    REQUIRE(a.ok());
    CHECK(a->source == "decompressed");
    CHECK(a->array.data == elements(raw, 3));
    CHECK(read_all(file) == good);  // and the cache is whole again
  }
  SECTION("a torn cache file (the header only)") {
    write_all(file, Bytes(good.begin(), good.begin() + 40));
    auto a = read_idx_gz_cached(src, 3, cache);
    REQUIRE(a.ok());
    CHECK(a->source == "decompressed");
    CHECK(a->array.data == elements(raw, 3));
  }
  SECTION("the source replaced by another file: its new content, not the cached one") {
    const Bytes other = idx_bytes({6, 2, 2}, 90);
    write_all(src, gzip(other));
    std::filesystem::last_write_time(src, std::filesystem::last_write_time(src) + std::chrono::seconds(5));
    auto a = read_idx_gz_cached(src, 3, cache);
    REQUIRE(a.ok());
    CHECK(a->source == "decompressed");
    CHECK(a->array.data == elements(other, 3));
    auto again = read_idx_gz_cached(src, 3, cache);
    REQUIRE(again.ok());
    CHECK(again->source == "from the cache");
    CHECK(again->array.data == elements(other, 3));
  }
  SECTION("the same size and time but another magic: not a cache file of this format") {
    Bytes bad = good;
    bad[6] = '9';
    write_all(file, bad);
    auto a = read_idx_gz_cached(src, 3, cache);
    REQUIRE(a.ok());
    CHECK(a->source == "decompressed");
  }
}

TEST_CASE("a cache folder that cannot be written costs the cache, not the load", "[idx][cache]") {
  IdxDir dir;
  const Bytes raw = idx_bytes({2, 2, 2});
  const std::string src = dir.write("y-idx3-ubyte.gz", gzip(raw));
  const std::string blocker = dir.write("a-file", {1, 2, 3});  // a file where the folder should be
  auto a = read_idx_gz_cached(src, 3, blocker + "/cache");
  REQUIRE(a.ok());
  CHECK(a->source.starts_with("decompressed; not cached: cannot create "));
  CHECK(a->array.data == elements(raw, 3));

  auto none = read_idx_gz_cached(src, 3, "");  // no cache asked for: nothing written anywhere
  REQUIRE(none.ok());
  CHECK(none->source == "decompressed");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator{}) == 2);
}

TEST_CASE("a source that does not parse is refused and leaves no cache file", "[idx][cache]") {
  IdxDir dir;
  Bytes raw = idx_bytes({2, 2, 2});
  raw.push_back(0);  // a byte after the data the dimensions describe
  const std::string src = dir.write("z-idx3-ubyte.gz", gzip(raw));
  const std::string cache = (dir.path / "cache").string();
  auto a = read_idx_gz_cached(src, 3, cache);
  REQUIRE(!a.ok());
  CHECK(mentions(a.status(), "bytes after the IDX data"));
  CHECK(!std::filesystem::exists(idx_cache_path(src, cache)));
  auto missing = read_idx_gz_cached((dir.path / "absent.gz").string(), 3, cache);
  REQUIRE(!missing.ok());
  CHECK(missing.status().code() == Err::io);
}

TEST_CASE("Fashion-MNIST through the cache: the same images, and the start-up line says where from", "[idx][cache]") {
  IdxDir dir;
  const Bytes images = idx_bytes({3, 2, 2}, 40);
  const Bytes labels = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 9};
  dir.write("train-images-idx3-ubyte.gz", gzip(images));
  dir.write("train-labels-idx1-ubyte.gz", gzip(labels));
  dir.write("t10k-images-idx3-ubyte.gz", gzip(images));
  dir.write("t10k-labels-idx1-ubyte.gz", gzip(labels));
  const std::string cache = (dir.path / "cache").string();
  auto plain = FashionMnist::load(dir.path.string(), 0);
  auto first = FashionMnist::load(dir.path.string(), 0, cache);
  auto second = FashionMnist::load(dir.path.string(), 0, cache);
  REQUIRE(plain.ok());
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK((*plain)->describe() == "fashion-mnist (3 train, 3 eval, 2x2)");
  CHECK((*first)->describe() == "fashion-mnist (3 train, 3 eval, 2x2; images decompressed)");
  CHECK((*second)->describe() == "fashion-mnist (3 train, 3 eval, 2x2; images from the cache)");
  Batch a, b;
  const std::vector<std::size_t> items{0, 1, 2};
  (*plain)->train_batch(items, a);
  (*second)->train_batch(items, b);
  CHECK(a.features == b.features);
  CHECK(a.targets == b.targets);
  (*plain)->eval_batch(items, a);
  (*second)->eval_batch(items, b);
  CHECK(a.features == b.features);
}

TEST_CASE("a cache never takes a disk near full", "[idx][cache]") {
  constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
  CHECK(cache_room_refusal(1000 * MiB, 2000 * MiB, 47 * MiB).empty());
  // After the cache at least its own size again stays free...
  CHECK(cache_room_refusal(94 * MiB, 200 * MiB, 47 * MiB).empty());
  CHECK(cache_room_refusal(93 * MiB, 200 * MiB, 47 * MiB) ==
        "93 MiB free of 200 MiB; a cache of 47 MiB would leave less than 47 MiB");
  // ... and a tenth of the disk.
  CHECK(cache_room_refusal(147 * MiB, 1000 * MiB, 47 * MiB).empty());
  CHECK(!cache_room_refusal(146 * MiB, 1000 * MiB, 47 * MiB).empty());
  // The small disks of the full-disk scenario: never.
  CHECK(!cache_room_refusal(3 * MiB, 4 * MiB, 47 * MiB).empty());
  CHECK(!cache_room_refusal(0, 0, 1).empty());
}
