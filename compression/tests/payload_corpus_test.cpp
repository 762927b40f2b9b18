// Replays bad payloads through the decoders (run under ASan+UBSan in
// scripts/test.sh): the checked-in corpus under corpus/, every truncation of
// a valid payload of each chain, and seeded random mutations. Each must give
// an error or finite values; truncations and header damage must give the
// right error.
//
// The corpus holds one valid payload per chain; regenerate it with
//   GEOLOCO_REGENERATE_CORPUS=1 build-sanitize/tests/compression_decode_test "[corpus]"
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "compression/counter_rng.h"
#include "compression/payload.h"
#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

namespace {
const std::filesystem::path kCorpusDir = "tests/corpus";

// Decodes with the chain-agnostic decoder and with the pipeline; both must
// end in an error or in finite values. Returns the chain-agnostic result,
// whose error names the damage (the pipeline's says "another chain").
Status decode_both(Pipeline& p, std::span<const std::byte> payload, std::size_t n) {
  std::vector<float> out(n);
  Status any = decode_payload(payload, out);
  if (any.ok()) {
    for (float v : out) REQUIRE(std::isfinite(v));
  }
  Status own = p.decode(payload, out);
  if (own.ok()) {
    for (float v : out) REQUIRE(std::isfinite(v));
  }
  // The pipeline is the stricter reader (it also insists on its own chain,
  // down to the zstd level): whatever it accepts, the generic decoder does too.
  if (own.ok()) REQUIRE(any.ok());
  return any;
}
}  // namespace

TEST_CASE("every truncation of a valid payload is refused as truncated or malformed", "[sanitize]") {
  for (const auto& chain : test::all_chains()) {
    auto p = test::make_pipeline(chain);
    INFO(p.describe());
    auto in = test::gradient(700, 9);
    auto payload = test::encode(p, in);
    for (std::size_t len = 0; len < payload.size(); ++len) {
      Status s = decode_both(p, std::span(payload).first(len), in.size());
      REQUIRE_FALSE(s.ok());
      REQUIRE((s.code() == Err::truncated || s.code() == Err::malformed));
    }
    // One byte too many is refused as well.
    payload.push_back(std::byte{0});
    CHECK(decode_both(p, payload, in.size()).code() == Err::malformed);
  }
}

TEST_CASE("header damage gets its own error", "[sanitize]") {
  auto p = test::make_pipeline({QuantizeSpec{4, 128}, ZstdSpec{}});
  auto payload = test::encode(p, test::gradient(1000));
  auto damaged = [&](std::size_t offset, std::uint64_t value, std::size_t width) {
    auto copy = payload;
    std::memcpy(copy.data() + offset, &value, width);
    return decode_both(p, copy, 1000);
  };
  CHECK(damaged(0, 0x12345678, 4).code() == Err::malformed);   // magic
  CHECK(damaged(4, 2, 1).code() == Err::unsupported);          // version
  CHECK(damaged(5, 0, 1).code() == Err::malformed);            // stage count
  CHECK(damaged(6, 0xffff, 2).code() == Err::truncated);       // descriptor size
  CHECK(damaged(8, 1ull << 60, 8).code() == Err::mismatch);    // element count
  CHECK(damaged(16, 1ull << 40, 8).code() == Err::malformed);  // raw size over the bound
  CHECK(damaged(24, 1ull << 62, 8).code() == Err::truncated);  // body size
  CHECK(damaged(32, 99, 1).code() == Err::unsupported);        // codec id
  CHECK(damaged(34, 3, 1).code() == Err::malformed);           // quantize bits = 3
}

TEST_CASE("seeded random mutations never crash and never yield non-finite values", "[sanitize]") {
  for (const auto& chain : test::all_chains()) {
    auto p = test::make_pipeline(chain);
    auto in = test::gradient(2000, 4);
    const auto payload = test::encode(p, in);
    for (std::uint64_t trial = 0; trial < 300; ++trial) {
      auto copy = payload;
      const int flips = 1 + int(counter_random(trial, 0) % 4);
      for (int f = 0; f < flips; ++f) {
        const auto r = counter_random(trial, 1 + f);
        copy[r % copy.size()] ^= std::byte(1u << ((r >> 32) % 8));
      }
      (void)decode_both(p, copy, in.size());
    }
  }
}

TEST_CASE("the checked-in corpus decodes to an error or to finite values", "[sanitize][corpus]") {
  if (std::getenv("GEOLOCO_REGENERATE_CORPUS") != nullptr) {
    std::filesystem::create_directories(kCorpusDir);
    int i = 0;
    for (const auto& chain : test::all_chains()) {
      auto p = test::make_pipeline(chain, Simd::scalar);
      auto payload = test::encode(p, test::gradient(257 + 64 * i, i), i);
      std::ofstream(kCorpusDir / ("chain" + std::to_string(i++) + ".bin"), std::ios::binary)
          .write(reinterpret_cast<const char*>(payload.data()), payload.size());
    }
  }
  REQUIRE(std::filesystem::is_directory(kCorpusDir));
  int files = 0, decoded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kCorpusDir)) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(c.size());
    std::memcpy(bytes.data(), c.data(), c.size());
    auto header = parse_payload_header(bytes);
    std::size_t n = header.ok() && header->element_count < (1u << 20) ? header->element_count : 100;
    std::vector<float> out(n);
    ++files;
    if (decode_payload(bytes, out).ok()) {
      ++decoded;
      for (float v : out) REQUIRE(std::isfinite(v));
    }
  }
  CHECK(files >= static_cast<int>(test::all_chains().size()));
  CHECK(decoded >= static_cast<int>(test::all_chains().size()));  // the valid seeds decode
}
