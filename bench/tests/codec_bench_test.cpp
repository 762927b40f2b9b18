// The benchmark's figures are measured, not made up: a tiny run gives every
// codec with plausible, internally consistent values, and the JSON lines
// carry exactly the documented keys.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/codec_bench.h"

using namespace geoloco;

TEST_CASE("bench codecs measures every codec and prints the documented JSON keys") {
  auto rows = bench::run_codec_bench({1u << 20, 1, 3});
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 12);
  for (const auto& r : *rows) {
    INFO(r.codec);
    CHECK(r.encode_gbps > 0);
    CHECK(r.decode_gbps > 0);
    CHECK(r.memcpy_gbps == rows->front().memcpy_gbps);
  }
  auto find = [&](const std::string& name) {
    for (const auto& r : *rows)
      if (r.codec == name) return r;
    FAIL("no row " << name);
    return bench::CodecBenchRow{};
  };
  CHECK(find("zstd(3)").rel_l2_error == 0.0);  // lossless
  CHECK(find("fp16").ratio == Approx(2.0).epsilon(0.01));
  CHECK(find("quantize(8)").ratio == Approx(4.0 / (1 + 4.0 / 128)).epsilon(0.01));  // 1 byte + 4/128 per value
  CHECK(find("quantize(4)").rel_l2_error > find("quantize(8)").rel_l2_error);
  CHECK(find("topk(0.01)|quantize(4)|zstd").ratio > 50);
  // zstd after quantize(8) is lossless: the chain's error is quantize's, at any level.
  for (const char* chain : {"quantize(8)|zstd(3)", "quantize(8)|zstd(1)", "quantize(8)|zstd(-1)"}) {
    INFO(chain);
    CHECK(find(chain).rel_l2_error == find("quantize(8)").rel_l2_error);
    CHECK(find(chain).ratio >= find("quantize(8)").ratio * 0.99);
  }

  std::ostringstream out;
  bench::print_codec_json(*rows, out);
  std::istringstream lines(out.str());
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    CHECK(j.size() == 6);
    for (const char* key : {"codec", "encode_gbps", "decode_gbps", "ratio", "rel_l2_error", "memcpy_gbps"})
      CHECK(j.contains(key));
    ++count;
  }
  CHECK(count == 12);
  CHECK_FALSE(bench::run_codec_bench({100, 1, 1}).ok());
}
