// The IDX reader refuses truncated, corrupt and inconsistent files with a
// message naming the file and the rule (run under ASan+UBSan too: these are
// untrusted bytes).
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "inner/data/fashion_mnist.h"
#include "inner/data/idx.h"
#include "inner/tests/idx_files.h"

using namespace geoloco;
using namespace geoloco::inner;
using namespace geoloco::inner::testing;

TEST_CASE("a well-formed IDX file parses", "[idx]") {
  auto a = parse_idx(idx_bytes({3, 2, 2}), 3, "ok.idx");
  REQUIRE(a.ok());
  CHECK(a->dims == std::vector<std::size_t>{3, 2, 2});
  CHECK(a->data.size() == 12);
  CHECK(a->data[11] == 18);
  auto round = gunzip(gzip(idx_bytes({5})), kMaxIdxBytes, "ok.gz");
  REQUIRE(round.ok());
  CHECK(*round == idx_bytes({5}));
}

TEST_CASE("IDX parser refuses bad headers and sizes", "[idx]") {
  auto bad_magic = idx_bytes({4});
  bad_magic[0] = 1;
  auto r = parse_idx(bad_magic, 1, "labels.idx");
  CHECK(r.status().code() == Err::malformed);
  CHECK(mentions(r.status(), "labels.idx: bad IDX magic"));

  r = parse_idx(idx_bytes({4}, 0, 0x0d), 1, "floats.idx");
  CHECK(r.status().code() == Err::unsupported);
  CHECK(mentions(r.status(), "is not unsigned byte"));

  r = parse_idx(idx_bytes({2, 2}), 3, "images.idx");
  CHECK(r.status().code() == Err::malformed);
  CHECK(mentions(r.status(), "has 2 dimensions, expected 3"));

  r = parse_idx(idx_bytes({2, 0, 2}), 3, "zero.idx");
  CHECK(r.status().code() == Err::malformed);
  CHECK(mentions(r.status(), "dimension 1 is zero"));

  Bytes huge = idx_bytes({1});
  huge = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  r = parse_idx(huge, 3, "huge.idx");
  CHECK(r.status().code() == Err::too_large);

  for (std::size_t cut : {0, 2, 5, 11}) {
    Bytes b = idx_bytes({2, 3});
    b.resize(cut);
    r = parse_idx(b, 2, "short.idx");
    INFO("cut at " << cut);
    CHECK(r.status().code() == Err::truncated);
  }
  Bytes short_data = idx_bytes({2, 3});
  short_data.pop_back();
  r = parse_idx(short_data, 2, "short.idx");
  CHECK(r.status().code() == Err::truncated);
  CHECK(mentions(r.status(), "IDX data has 5 bytes, the dimensions say 6"));

  Bytes trailing = idx_bytes({2, 3});
  trailing.push_back(0);
  r = parse_idx(trailing, 2, "long.idx");
  CHECK(r.status().code() == Err::malformed);
  CHECK(mentions(r.status(), "1 bytes after the IDX data"));
}

TEST_CASE("gunzip refuses non-gzip, truncated, corrupt and oversized streams", "[idx]") {
  const Bytes raw = idx_bytes({64, 16});
  const Bytes gz = gzip(raw);

  auto r = gunzip(raw, kMaxIdxBytes, "plain.idx");
  CHECK(r.status().code() == Err::malformed);
  CHECK(mentions(r.status(), "plain.idx: not a gzip file"));

  for (std::size_t cut : {std::size_t{2}, std::size_t{10}, gz.size() / 2, gz.size() - 1}) {
    Bytes t(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(cut));
    auto c = gunzip(t, kMaxIdxBytes, "cut.gz");
    INFO("cut at " << cut << " of " << gz.size());
    CHECK_FALSE(c.ok());
    CHECK((c.status().code() == Err::truncated || c.status().code() == Err::malformed));
  }

  Bytes crc = gz;
  crc[crc.size() - 6] ^= 0xff;  // inside the CRC-32 trailer
  r = gunzip(crc, kMaxIdxBytes, "crc.gz");
  CHECK(r.status().code() == Err::malformed);
  CHECK(mentions(r.status(), "crc.gz: corrupt gzip data"));

  // The trailer's size is only a hint for the buffer: one that lies, small
  // or huge, is refused by zlib's length check, never trusted.
  for (std::uint8_t top : {std::uint8_t{0x00}, std::uint8_t{0xff}}) {
    Bytes len = gz;
    len[len.size() - 4] ^= 0x01;
    len[len.size() - 1] = top;
    r = gunzip(len, kMaxIdxBytes, "length.gz");
    CHECK(r.status().code() == Err::malformed);
    CHECK(mentions(r.status(), "length.gz: corrupt gzip data"));
  }

  Bytes extra = gz;
  extra.push_back(0x42);
  r = gunzip(extra, kMaxIdxBytes, "extra.gz");
  CHECK(r.status().code() == Err::malformed);
  CHECK(mentions(r.status(), "after the end of the gzip stream"));

  r = gunzip(gz, raw.size() - 1, "big.gz");
  CHECK(r.status().code() == Err::too_large);
  auto exact = gunzip(gz, raw.size(), "exact.gz");
  REQUIRE(exact.ok());
  CHECK(*exact == raw);
}

TEST_CASE("image sets: missing files, count mismatch and bad labels are refused", "[idx]") {
  IdxDir dir;
  const std::string images = dir.write("img.gz", gzip(idx_bytes({3, 2, 2})));
  Bytes labels = idx_bytes({3}, 0);
  const std::string good_labels = dir.write("lab.gz", gzip(labels));
  auto ok = load_image_set(images, good_labels);
  REQUIRE(ok.ok());
  CHECK(ok->count == 3);
  CHECK(ok->labels == std::vector<std::uint8_t>{0, 1, 2});

  auto missing = load_image_set((dir.path / "nope.gz").string(), good_labels);
  CHECK(missing.status().code() == Err::io);
  CHECK(mentions(missing.status(), "nope.gz: cannot open"));

  const std::string four = dir.write("four.gz", gzip(idx_bytes({4}, 0)));
  auto mismatch = load_image_set(images, four);
  CHECK(mismatch.status().code() == Err::mismatch);
  CHECK(mentions(mismatch.status(), "holds 3 images but"));

  const std::string big_label = dir.write("big.gz", gzip(idx_bytes({3}, 9)));
  auto bad = load_image_set(images, big_label);
  CHECK(bad.status().code() == Err::malformed);
  CHECK(mentions(bad.status(), "label 10 of item 1 is not below the 10 classes"));

  Bytes gz = gzip(idx_bytes({3, 2, 2}));
  gz.resize(gz.size() - 3);
  auto cut = load_image_set(dir.write("cut.gz", gz), good_labels);
  CHECK_FALSE(cut.ok());
  CHECK(mentions(cut.status(), "cut.gz"));
}
