// What the round-log and STATE_SYNC tests build rounds from: a job's
// q8+zstd pipeline, a seeded averaged Δ as the all-gather leaves it, and a
// live round stepped as geolocod steps it.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/digest.h"
#include "compression/pipeline.h"
#include "diloco/chunked_step.h"
#include "outer/outer_state.h"
#include "transport/allreduce.h"

namespace geoloco::daemon::testing {

namespace fs = std::filesystem;

inline fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("geoloco-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

inline compression::PipelineSpec q8_zstd() {
  compression::PipelineSpec spec;
  spec.stages.push_back(compression::QuantizeSpec{8, 128, compression::Rounding::nearest});
  spec.stages.push_back(compression::ZstdSpec{3});
  return spec;
}

// A round's averaged Δ as the all-gather leaves it: `values` values from a
// seeded walk, encoded in chunks of `chunk` values.
inline transport::EncodedOutput encoded_delta(std::uint64_t values, std::uint64_t chunk, std::uint32_t seed,
                                              const compression::PipelineSpec& spec) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  auto pipeline = compression::Pipeline::create(spec);
  REQUIRE(pipeline.ok());
  transport::EncodedOutput out;
  out.values = values;
  out.pipeline = spec;
  for (std::uint64_t begin = 0; begin < values; begin += chunk) {
    const std::uint64_t n = std::min(chunk, values - begin);
    std::vector<float> d(n);
    for (auto& v : d) v = noise(rng);
    Buffer bytes(pipeline->max_encoded_size(n));
    auto size = pipeline->encode(d, bytes, seed);
    REQUIRE(size.ok());
    bytes.resize(*size);
    out.ranges.push_back({begin, n});
    out.chunks.push_back(std::move(bytes));
  }
  return out;
}

inline outer::OuterState initial_state(std::uint64_t n) {
  std::vector<float> initial(n);
  for (std::uint64_t i = 0; i < n; ++i) initial[i] = 0.001f * static_cast<float>(i % 97) - 0.04f;
  auto s = outer::OuterState::create("replay", {{"w", {n}, 0}}, std::move(initial));
  REQUIRE(s.ok());
  return std::move(*s);
}

// The live round: the digest voted (computed aside), then the step applied, as geolocod does.
inline std::string live_round(outer::OuterState& s, const transport::EncodedOutput& d, std::uint64_t offset,
                              const diloco::OuterOptimizerOptions& outer) {
  auto scale = diloco::chunked_clip_scale(d.chunk_list(), outer.clip_norm);
  REQUIRE(scale.ok());
  auto voted = diloco::stepped_anchor_digest(s.anchor, s.momentum, offset, d.values, d.chunk_list(), outer, *scale);
  REQUIRE(voted.ok());
  REQUIRE(diloco::step_chunks(s.anchor, s.momentum, offset, d.chunk_list(), outer, *scale).ok());
  REQUIRE(digest_hex(s.anchor_digest()) == digest_hex(*voted));
  ++s.round;
  return digest_hex(*voted);
}

// Flips one bit of the byte `from_end` bytes before the end of `file`.
/// Bytes of a round-log entry's last line (format 2):
/// `<16 hex> {"digest":"<16 hex>","header":"<16 hex>"}\n`.
inline constexpr std::uint64_t kEntryLastLine = 17 + 57 + 1;

inline void flip_byte(const fs::path& file, std::uint64_t from_end) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-static_cast<std::streamoff>(from_end), std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-static_cast<std::streamoff>(from_end), std::ios::end);
  c = static_cast<char>(c ^ 0x20);
  f.write(&c, 1);
}

}  // namespace geoloco::daemon::testing
