#include "outer/checkpoint.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "common/digest.h"

using namespace geoloco;
using namespace geoloco::outer;
namespace fs = std::filesystem;

namespace {

// The state a writer saves at round k: every value depends on k, so a mix of
// two rounds' bytes can never pass for either.
OuterState state_at(std::uint64_t k, std::uint64_t per_tensor = 1000) {
  OuterState s;
  s.job = "ckpt-test";
  s.round = k;
  s.layout = {{"embed", {per_tensor / 2, 2}, 0}, {"head", {per_tensor}, per_tensor}, {"bias", {}, 2 * per_tensor}};
  const std::uint64_t n = layout_values(s.layout);
  s.anchor.resize(n);
  s.momentum.resize(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    s.anchor[i] = static_cast<float>(k) + 1e-3f * static_cast<float>(i % 997);
    s.momentum[i] = -static_cast<float>(k) * 0.5f + 1e-4f * static_cast<float>(i % 101);
  }
  s.residual("site-b").assign(n, 0.25f * static_cast<float>(k));
  s.residual("site-a").assign(n, -0.125f * static_cast<float>(k));
  return s;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "geoloco-ckpt-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<std::byte> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<std::byte> with_header(const std::string& json, const std::vector<std::byte>& data) {
  std::vector<std::byte> out(8 + json.size());
  const std::uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, json.data(), json.size());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void check_equal(const OuterState& a, const OuterState& b) {
  CHECK(a.job == b.job);
  CHECK(a.round == b.round);
  REQUIRE(a.layout.size() == b.layout.size());
  for (std::size_t i = 0; i < a.layout.size(); ++i) {
    CHECK(a.layout[i].name == b.layout[i].name);
    CHECK(a.layout[i].shape == b.layout[i].shape);
  }
  CHECK(a.anchor == b.anchor);
  CHECK(a.momentum == b.momentum);
  REQUIRE(a.residuals.size() == b.residuals.size());
  for (std::size_t i = 0; i < a.residuals.size(); ++i) {
    CHECK(a.residuals[i].site == b.residuals[i].site);
    CHECK(a.residuals[i].values == b.residuals[i].values);
  }
}

}  // namespace

TEST_CASE("checkpoint: save and load round-trip the whole outer state") {
  TempDir dir;
  const fs::path path = dir.path / "outer.safetensors";
  const OuterState s = state_at(42);
  REQUIRE(save_checkpoint(path, s, "cfg-1234").ok());
  CHECK_FALSE(fs::exists(path.string() + ".tmp"));
  auto loaded = load_checkpoint(path);
  INFO(loaded.status().to_string());
  REQUIRE(loaded.ok());
  CHECK(loaded->config_hash == "cfg-1234");
  OuterState expected = s;
  std::sort(expected.residuals.begin(), expected.residuals.end(),
            [](const auto& a, const auto& b) { return a.site < b.site; });
  check_equal(loaded->state, expected);
  CHECK(loaded->state.anchor_digest() == s.anchor_digest());

  // The layout on disk is safetensors: u64 header length, JSON, aligned data.
  const auto bytes = read_file(path);
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  CHECK(header_len % 8 == 0);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  CHECK_THAT(header, Catch::Contains("\"anchor\":{\"data_offsets\":[0,8004],\"dtype\":\"F32\",\"shape\":[2001]}"));
  CHECK_THAT(header, Catch::Contains("\"format\":\"geoloco.outer\""));
  CHECK_THAT(header, Catch::Contains("\"round\":\"42\""));
  CHECK(bytes.size() == 8 + header_len + 4 * 2001 * 4);
  // Saving the same state twice gives the same bytes.
  REQUIRE(save_checkpoint(path, s, "cfg-1234").ok());
  CHECK(read_file(path) == bytes);

  // Saved from views of the same values (geolocod's writer thread), residuals
  // given in another order: the same bytes.
  CheckpointSource view{s.job, s.round, s.layout, s.anchor, s.momentum, {}};
  for (auto it = s.residuals.rbegin(); it != s.residuals.rend(); ++it)
    view.residuals.emplace_back(it->site, it->values);
  REQUIRE(save_checkpoint(path, view, "cfg-1234").ok());
  CHECK(read_file(path) == bytes);
  // Its rules are OuterState::validate()'s.
  CheckpointSource short_momentum = view;
  short_momentum.momentum = short_momentum.momentum.first(10);
  CHECK_THAT(save_checkpoint(path, short_momentum, "cfg-1234").message(),
             Catch::Contains("momentum has 10 values but the layout has 2001"));
  CheckpointSource twice = view;
  twice.residuals.push_back(twice.residuals.front());
  CHECK_THAT(save_checkpoint(path, twice, "cfg-1234").message(), Catch::Contains("has two residuals"));
  CHECK(read_file(path) == bytes);  // a refused save leaves the file as it was
}

TEST_CASE("checkpoint: every truncation is refused with a clear message") {
  TempDir dir;
  const fs::path path = dir.path / "small.safetensors";
  REQUIRE(save_checkpoint(path, state_at(3, 8), "h").ok());
  const auto bytes = read_file(path);
  REQUIRE(parse_checkpoint(bytes, "small").ok());
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    auto r = parse_checkpoint(std::span(bytes).first(len), "small");
    REQUIRE_FALSE(r.ok());
    const Err code = r.status().code();
    INFO(len << ": " << r.status().message());
    CHECK((code == Err::truncated || code == Err::malformed));
    CHECK_THAT(r.status().message(), Catch::StartsWith("small: "));
  }
  // A file cut inside the data section says so.
  std::filesystem::resize_file(path, bytes.size() - 10);
  auto r = load_checkpoint(path);
  CHECK(r.status().code() == Err::truncated);
  CHECK_THAT(r.status().message(), Catch::Contains("truncated"));
  CHECK_THAT(r.status().message(), Catch::Contains(path.string()));
}

TEST_CASE("checkpoint: foreign, corrupted and malformed files are refused naming the problem") {
  TempDir dir;
  const fs::path path = dir.path / "c.safetensors";
  REQUIRE(save_checkpoint(path, state_at(5, 8), "h").ok());
  const auto good = read_file(path);
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, good.data(), 8);
  const std::string header(reinterpret_cast<const char*>(good.data() + 8), header_len);
  const std::vector<std::byte> data(good.begin() + 8 + header_len, good.end());
  auto refuse = [](const std::vector<std::byte>& bytes, Err code, const std::string& text) {
    auto r = parse_checkpoint(bytes, "f");
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(r.status().code() == code);
    CHECK_THAT(r.status().message(), Catch::Contains(text));
  };
  auto replace = [&](std::string from, std::string to) {
    std::string h = header;
    const auto at = h.find(from);
    REQUIRE(at != std::string::npos);
    h.replace(at, from.size(), to);
    return with_header(h, data);
  };

  // A flipped bit in the data.
  auto flipped = good;
  flipped[8 + header_len + 5] ^= std::byte{0x10};
  refuse(flipped, Err::mismatch, "does not match its digest");
  // A valid safetensors file from elsewhere (a model, no geoloco metadata).
  refuse(with_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::vector<std::byte>(4)),
         Err::mismatch, "not a geoloco outer checkpoint");
  refuse(with_header(R"({"__metadata__":{"format":"pt"}})", {}), Err::mismatch, "not a geoloco outer checkpoint");
  // Not JSON, not an object.
  refuse(with_header("[1, 2]", {}), Err::malformed, "not a JSON object");
  refuse(with_header("{\"anchor\": ", {}), Err::malformed, "not a JSON object");
  // A header length far beyond the file, or beyond the bound.
  auto huge = good;
  const std::uint64_t big = 1ull << 40;
  std::memcpy(huge.data(), &big, 8);
  refuse(huge, Err::too_large, "over the bound");
  const std::uint64_t past = good.size();
  std::memcpy(huge.data(), &past, 8);
  refuse(huge, Err::truncated, "bytes of JSON but the file has only");
  // Another version, another dtype.
  refuse(replace("\"format_version\":\"1\"", "\"format_version\":\"2\""), Err::unsupported, "format version 2");
  refuse(replace("\"dtype\":\"F32\"", "\"dtype\":\"F16\""), Err::unsupported, "has dtype F16");
  // Offsets that disagree with the shape, overlap, or run past the data.
  refuse(replace("\"data_offsets\":[0,68]", "\"data_offsets\":[0,64]"), Err::malformed, "has shape [17]");
  refuse(replace("\"data_offsets\":[0,68]", "\"data_offsets\":[4,72]"), Err::malformed, "ranges must not overlap");
  refuse(replace("\"data_offsets\":[0,68]", "\"data_offsets\":[68,0]"), Err::malformed, "run backwards");
  refuse(replace("\"round\":\"5\"", "\"round\":\"-5\""), Err::malformed, "not an unsigned decimal integer");
  refuse(replace("\"job\":\"ckpt-test\"", "\"job\":7"), Err::malformed, "must be a string");
  refuse(replace("\"anchor\":", "\"anchr\":"), Err::malformed, "unknown tensor 'anchr'");
  // Bytes after the last tensor.
  auto trailing = good;
  trailing.push_back(std::byte{0});
  refuse(trailing, Err::malformed, "bytes follow the last tensor");
  // A missing file.
  auto missing = load_checkpoint(dir.path / "nope.safetensors");
  CHECK(missing.status().code() == Err::io);
  CHECK_THAT(missing.status().message(), Catch::Contains("nope.safetensors"));
  // An invalid state is not written at all.
  OuterState bad = state_at(1, 8);
  bad.momentum.pop_back();
  CHECK_THAT(save_checkpoint(dir.path / "bad", bad, "h").message(), Catch::Contains("momentum has 16 values"));
  CHECK_FALSE(fs::exists(dir.path / "bad"));
}

TEST_CASE("checkpoint: random corruption never crashes the loader") {
  TempDir dir;
  const fs::path path = dir.path / "m.safetensors";
  REQUIRE(save_checkpoint(path, state_at(9, 8), "h").ok());
  const auto good = read_file(path);
  std::mt19937_64 rng(17);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) bytes[rng() % bytes.size()] = static_cast<std::byte>(rng());
    auto r = parse_checkpoint(bytes, "m");
    if (r.ok()) {
      ++accepted;
      // Whatever passes is a consistent state (a change the digests do not
      // cover, e.g. inside a metadata string value).
      CHECK(r->state.validate().ok());
    }
  }
  CHECK(accepted < 3000 / 5);
}

TEST_CASE("checkpoint: kill -9 of a writer at random instants leaves the old or the new complete checkpoint") {
  TempDir dir;
  const fs::path path = dir.path / "outer.safetensors";
  const std::uint64_t values = 200000;  // about 3.2 MB per checkpoint: writes take a while
  std::uint64_t round = 0;
  REQUIRE(save_checkpoint(path, state_at(round, values), "h").ok());

  // Calibrate: how long one save takes here.
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(save_checkpoint(path, state_at(round, values), "h").ok());
  double max_delay_us =
      2.0 * static_cast<double>(
                std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());

  std::mt19937_64 rng(20261130);
  const int trials = 60;
  int kept_old = 0, advanced = 0;
  for (int trial = 0; trial < trials; ++trial) {
    // The child saves round after round until it is killed, so every kill
    // lands somewhere inside the save path (or between two saves).
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      for (std::uint64_t k = round + 1;; ++k) {
        if (!save_checkpoint(path, state_at(k, values), "h").ok()) ::_exit(2);
      }
    }
    const auto delay = std::chrono::microseconds(static_cast<std::uint64_t>(max_delay_us * (rng() % 1001) / 1000.0));
    std::this_thread::sleep_for(delay);
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));  // killed, not failed

    auto loaded = load_checkpoint(path);
    INFO("trial " << trial << ", delay " << delay.count() << " us: " << loaded.status().to_string());
    REQUIRE(loaded.ok());
    const std::uint64_t got = loaded->state.round;
    REQUIRE(got >= round);
    // Complete, and exactly the state of that round.
    OuterState expected = state_at(got, values);
    REQUIRE(loaded->state.anchor_digest() == expected.anchor_digest());
    REQUIRE(digest_f32(loaded->state.momentum) == digest_f32(expected.momentum));
    REQUIRE(loaded->state.residuals[0].site == "site-a");  // residuals load in site order
    REQUIRE(digest_f32(loaded->state.residuals[0].values) == digest_f32(expected.residual("site-a")));
    if (got == round) {
      ++kept_old;
      // On a loaded machine saves may take longer than calibrated: widen the
      // window until a kill has landed after a completed save (widening on
      // every kept checkpoint grew it without bound: 1.25^40 over 60 trials).
      if (advanced == 0) max_delay_us *= 1.25;
    } else {
      ++advanced;
    }
    round = got;
  }
  INFO("kept the old checkpoint in " << kept_old << " trials, advanced in " << advanced);
  // Both outcomes happened: kills before a rename and kills after one.
  CHECK(kept_old > 0);
  CHECK(advanced > 0);
}

TEST_CASE("checkpoint: a write that fails (a full disk) leaves the old checkpoint and no partial file") {
  TempDir dir;
  const fs::path path = dir.path / "outer.safetensors";
  REQUIRE(save_checkpoint(path, state_at(1, 10), "cfg").ok());
  const auto before = read_file(path);
  // A child whose files may not grow past 4 KiB: the next save's write fails
  // (EFBIG, as ENOSPC would on a full disk) part way through.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const Status saved = save_checkpoint(path, state_at(2, 100000), "cfg");
    const bool says_why = !saved.ok() && saved.message().find("File too large") != std::string::npos;
    ::_exit(says_why ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(path.string() + ".tmp"));
  CHECK(read_file(path) == before);
  auto loaded = load_checkpoint(path);
  REQUIRE(loaded.ok());
  CHECK(loaded->state.round == 1);
}
