// Golden payloads: a fixed input encoded by each chain must give exactly the
// bytes checked in under golden/, so the wire format cannot drift unnoticed.
// After an intended format change (with a version bump), regenerate with
//   GEOLOCO_REGENERATE_GOLDEN=1 build/tests/compression_test "[golden]"
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "compression/counter_rng.h"
#include "compression/tests/test_util.h"

using namespace geoloco;
using namespace geoloco::compression;

namespace {
const std::filesystem::path kGoldenDir = "tests/golden";  // ctest runs in compression/

std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

// Integer arithmetic and exact float scalings only (no libm), so the input
// is the same on every machine and library version.
std::vector<float> golden_input() {
  std::vector<float> v(300);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto r = counter_random(2026, i);
    const float u = static_cast<float>(r >> 40) * 0x1p-24f - 0.5f;
    v[i] = u * std::ldexp(1.0f, -static_cast<int>(r % 12));
  }
  return v;
}
}  // namespace

TEST_CASE("golden payloads: the wire format of every codec is pinned", "[golden]") {
  const bool regenerate = std::getenv("GEOLOCO_REGENERATE_GOLDEN") != nullptr;
  const std::vector<std::pair<std::string, std::vector<StageSpec>>> cases{
      {"raw", {}},
      {"fp16", {Fp16Spec{}}},
      {"bf16", {Bf16Spec{}}},
      {"quantize8", {QuantizeSpec{8, 64, Rounding::nearest}}},
      {"quantize4_stochastic", {QuantizeSpec{4, 32, Rounding::stochastic}}},
      {"quantize2", {QuantizeSpec{2, 16, Rounding::nearest}}},
      {"topk", {TopkSpec{0.1, 64}}},
      {"zstd", {ZstdSpec{3}}},
      {"topk_quantize4_zstd", {TopkSpec{0.1, 64}, QuantizeSpec{4, 32, Rounding::nearest}, ZstdSpec{3}}},
  };
  auto in = golden_input();
  for (const auto& [name, chain] : cases) {
    auto p = test::make_pipeline(chain, Simd::scalar);
    auto payload = test::encode(p, in, 42);
    const auto path = kGoldenDir / (name + ".bin");
    if (regenerate) {
      std::filesystem::create_directories(kGoldenDir);
      std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(payload.data()), payload.size());
    }
    INFO(path.string());
    REQUIRE(std::filesystem::exists(path));
    CHECK(read_file(path) == payload);
    // And the checked-in bytes still decode.
    std::vector<float> out(in.size());
    CHECK(decode_payload(read_file(path), out).ok());
  }
}
