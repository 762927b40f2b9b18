#include "compression/chunked.h"

#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

namespace {
long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// A cheap, exactly reproducible value for element i of a huge virtual tensor.
// Integers in [-128, 127] scaled by a power of two: exact in bf16.
float virtual_value(std::uint64_t i) { return static_cast<float>(static_cast<std::int64_t>(i % 251) - 128) * 0x1p-10f; }
}  // namespace

TEST_CASE("chunk layout covers the tensor exactly") {
  ChunkLayout l{10, 4};
  CHECK(l.count() == 3);
  CHECK(l.offset(2) == 8);
  CHECK(l.length(2) == 2);
  CHECK(l.length(0) == 4);
  CHECK(ChunkLayout{0, 4}.count() == 0);
  CHECK(ChunkLayout{(1ull << 33) + 1, 1ull << 20}.count() == (1ull << 13) + 1);
}

TEST_CASE("a 17 GB tensor streams through encode and decode with memory bounded by the chunk") {
  // 2^32 + 12345 fp32 values: past every 32-bit offset. The values are made
  // one chunk at a time, so nothing of tensor size is ever allocated.
  const std::uint64_t total = (1ull << 32) + 12345;
  const ChunkLayout layout{total, 1ull << 20};
  auto p = test::make_pipeline({Bf16Spec{}});
  ChunkEncoder enc(p, layout);
  ChunkDecoder dec(p, layout);
  std::vector<float> chunk(layout.chunk), decoded(layout.chunk);
  const long rss_before = max_rss_kib();
  std::uint64_t bytes = 0, mismatches = 0;
  for (std::uint64_t c = 0; c < layout.count(); ++c) {
    const std::size_t len = layout.length(c);
    for (std::size_t i = 0; i < len; ++i) chunk[i] = virtual_value(layout.offset(c) + i);
    auto payload = enc.encode(c, std::span(chunk).first(len), 1);
    REQUIRE(payload.ok());
    bytes += payload->size();
    REQUIRE(dec.decode(c, *payload, std::span(decoded).first(len)).ok());
    for (std::size_t i = 0; i < len; ++i) mismatches += decoded[i] != chunk[i];  // exact in bf16
  }
  const long grown_kib = max_rss_kib() - rss_before;
  CHECK(mismatches == 0);
  CHECK(bytes > 2 * total);      // every value went through: 2 bytes each plus headers
  CHECK(grown_kib < 64 * 1024);  // a few chunk buffers, not 17 GB
}

TEST_CASE("chunks go through error feedback at their offsets, and bad indices are refused") {
  const ChunkLayout layout{10000, 3000};
  auto p = test::make_pipeline({TopkSpec{0.1, 1000}});
  ErrorFeedback ef(layout.total);
  ChunkEncoder enc(p, layout, &ef);
  auto tensor = test::gradient(layout.total);
  for (std::uint64_t c = 0; c < layout.count(); ++c) {
    auto payload = enc.encode(c, std::span(tensor).subspan(layout.offset(c), layout.length(c)), 3);
    REQUIRE(payload.ok());
  }
  // The residual of each chunk is the part topk dropped: about 90% of values nonzero.
  std::size_t nonzero = 0;
  for (float v : ef.residual()) nonzero += v != 0.0f;
  CHECK(nonzero > 8500);
  CHECK(nonzero < 9100);
  std::vector<float> values(3000);
  CHECK(enc.encode(4, values, 0).status().code() == Err::invalid_argument);
  CHECK(enc.encode(3, values, 0).status().code() == Err::invalid_argument);  // last chunk has 1000
}
