#include "daemon/round_deltas.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/digest.h"
#include "common/durable_file.h"

namespace geoloco::daemon {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kFormat = 1;
constexpr const char* kPrefix = "round-";
constexpr const char* kSuffix = ".delta";
// A header line longer than this is not one this program wrote (a chunk
// entry takes about 100 bytes, a round about 4 MiB per chunk).
constexpr std::size_t kMaxHeaderBytes = 64u << 20;

std::string hash_hex(std::span<const std::byte> bytes) { return digest_hex(xxh3_64(bytes)); }

std::optional<std::uint64_t> round_of(const std::string& name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  std::uint64_t round = 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  auto [end, ec] = std::from_chars(first, last, round);
  if (ec != std::errc() || end != last) return std::nullopt;
  return round;
}

}  // namespace

Result<RoundDeltas> RoundDeltas::open(const fs::path& dir, std::string config_hash) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot create the round log's folder ", dir.string(), ": ", ec.message());
  // A temp file is an append a crash interrupted: it was never voted on.
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".tmp") fs::remove(e.path(), ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot read the round log's folder ", dir.string(), ": ", ec.message());
  return RoundDeltas(dir, std::move(config_hash));
}

fs::path RoundDeltas::file_of(std::uint64_t round) const {
  char name[48];
  std::snprintf(name, sizeof name, "%s%020llu%s", kPrefix, static_cast<unsigned long long>(round), kSuffix);
  return dir_ / name;
}

Status RoundDeltas::append(std::uint64_t round, std::uint64_t attempt, std::uint64_t offset,
                           const std::string& digest, const transport::EncodedOutput& d) {
  GEOLOCO_RETURN_IF(d.ranges.size() != d.chunks.size(), Err::internal, "round ", round, "'s Δ has ",
                    d.ranges.size(), " ranges for ", d.chunks.size(), " chunks");
  json chunks = json::array();
  for (std::size_t i = 0; i < d.chunks.size(); ++i)
    chunks.push_back(json::array({d.ranges[i].begin, d.ranges[i].size, d.chunks[i].size(),
                                  hash_hex(std::span<const std::byte>(d.chunks[i]))}));
  const std::string text = json{{"format", kFormat}, {"config", config_hash_}, {"round", round},
                                {"attempt", attempt}, {"offset", offset},        {"values", d.values},
                                {"digest", digest},   {"chunks", std::move(chunks)}}
                               .dump();
  const std::string line = hash_hex(std::as_bytes(std::span(text))) + " " + text + "\n";
  return write_file_durably(file_of(round), [&](const FileSink& put) -> Status {
    GEOLOCO_TRY(put(std::as_bytes(std::span(line))));
    for (const auto& c : d.chunks) GEOLOCO_TRY(put(std::span<const std::byte>(c)));
    return {};
  });
}

std::vector<std::uint64_t> RoundDeltas::rounds() const {
  std::vector<std::uint64_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (auto r = round_of(e.path().filename().string())) out.push_back(*r);
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::optional<RoundDelta>> RoundDeltas::read(std::uint64_t round) const {
  const fs::path path = file_of(round);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<RoundDelta>();
  const std::uint64_t size = fs::file_size(path, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot read ", path.string(), ": ", ec.message());
  std::ifstream in(path, std::ios::binary);
  GEOLOCO_RETURN_IF(!in, Err::io, "cannot open ", path.string());
  auto damaged = [&](auto&&... why) {
    return GEOLOCO_ERROR(Err::mismatch, path.string(), " is damaged (", why..., "): it is not replayed");
  };
  std::string line;
  if (!std::getline(in, line) || in.eof() || line.size() > kMaxHeaderBytes) return damaged("no complete first line");
  const auto space = line.find(' ');
  if (space != 16) return damaged("no hash before the header");
  const std::string text = line.substr(17);
  if (line.compare(0, 16, hash_hex(std::as_bytes(std::span(text)))) != 0) return damaged("the header's hash differs");
  RoundDelta e;
  std::uint64_t expected = line.size() + 1;
  try {
    const json h = json::parse(text);
    if (h.at("format").get<int>() != kFormat) return damaged("format ", h.at("format").dump(), ", not ", kFormat);
    GEOLOCO_RETURN_IF(h.at("config").get<std::string>() != config_hash_, Err::mismatch, path.string(),
                      " is of another configuration of the job: it is not replayed");
    e.round = h.at("round").get<std::uint64_t>();
    if (e.round != round) return damaged("it holds round ", e.round);
    e.attempt = h.at("attempt").get<std::uint64_t>();
    e.offset = h.at("offset").get<std::uint64_t>();
    e.delta.values = h.at("values").get<std::uint64_t>();
    e.digest = h.at("digest").get<std::string>();
    std::uint64_t covered = 0;
    for (const auto& c : h.at("chunks")) {
      const transport::Range r{c.at(0).get<std::uint64_t>(), c.at(1).get<std::uint64_t>()};
      if (r.begin != covered) return damaged("a chunk starts at ", r.begin, ", not ", covered);
      covered += r.size;
      const std::uint64_t bytes = c.at(2).get<std::uint64_t>();
      if (bytes > size - std::min(size, expected)) return damaged("shorter than its chunks");
      expected += bytes;
      Buffer chunk(bytes);
      if (!in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(bytes)))
        return damaged("shorter than its chunks");
      if (hash_hex(std::span<const std::byte>(chunk)) != c.at(3).get<std::string>())
        return damaged("chunk ", e.delta.chunks.size(), "'s hash differs");
      e.delta.ranges.push_back(r);
      e.delta.chunks.push_back(std::move(chunk));
    }
    if (covered != e.delta.values) return damaged("its chunks cover ", covered, " of ", e.delta.values, " values");
  } catch (const json::exception& x) {
    return damaged("header: ", x.what());
  }
  if (expected != size) return damaged(size - std::min(size, expected), " bytes past its chunks");
  return std::optional<RoundDelta>(std::move(e));
}

Status RoundDeltas::cut_through(std::uint64_t round) {
  std::string failed;
  for (std::uint64_t r : rounds()) {
    if (r > round) break;
    std::error_code ec;
    fs::remove(file_of(r), ec);
    if (ec) failed += cat(failed.empty() ? "" : "; ", file_of(r).filename().string(), ": ", ec.message());
  }
  GEOLOCO_RETURN_IF(!failed.empty(), Err::io, "cannot remove from ", dir_.string(), ": ", failed);
  return {};
}

std::uint64_t RoundDeltas::bytes() const {
  std::uint64_t total = 0;
  for (std::uint64_t r : rounds()) {
    std::error_code ec;
    const auto n = fs::file_size(file_of(r), ec);
    if (!ec) total += n;
  }
  return total;
}

}  // namespace geoloco::daemon
