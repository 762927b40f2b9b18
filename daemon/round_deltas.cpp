#include "daemon/round_deltas.h"

#include <algorithm>
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

// Format 2 keeps the digest in a last line, so that the chunks can be
// written while it is computed; format 1 (the digest in the first line) is
// still read.
constexpr int kFormat = 2;
constexpr int kFirstFormat = 1;
// A last line is `<hash> {"digest":"<16>","header":"<16>"}\n`: about 60 bytes.
constexpr std::size_t kMaxLastLineBytes = 256;
constexpr const char* kPrefix = "round-";
constexpr const char* kSuffix = ".delta";
// A header line longer than this is not one this program wrote (a chunk
// entry takes about 100 bytes, a round about 4 MiB per chunk).
constexpr std::size_t kMaxHeaderBytes = 64u << 20;

std::string hash_hex(std::span<const std::byte> bytes) { return digest_hex(xxh3_64(bytes)); }

// `<xxh3-64 of text, 16 hex> <text>\n`: the entry's first and last lines.
std::string hashed_line(const std::string& text) {
  return hash_hex(std::as_bytes(std::span(text))) + " " + text + "\n";
}

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

Status RoundDeltas::append(std::uint64_t round, std::uint64_t attempt, std::uint64_t offset, const std::string& digest,
                           const transport::EncodedOutput& d) {
  return append(
      round, attempt, offset, [&] { return Result<std::string>(digest); }, d);
}

Status RoundDeltas::append(std::uint64_t round, std::uint64_t attempt, std::uint64_t offset,
                           const std::function<Result<std::string>()>& digest, const transport::EncodedOutput& d) {
  GEOLOCO_RETURN_IF(d.ranges.size() != d.chunks.size(), Err::internal, "round ", round, "'s Δ has ", d.ranges.size(),
                    " ranges for ", d.chunks.size(), " chunks");
  json chunks = json::array();
  for (std::size_t i = 0; i < d.chunks.size(); ++i)
    chunks.push_back(json::array(
        {d.ranges[i].begin, d.ranges[i].size, d.chunks[i].size(), hash_hex(std::span<const std::byte>(d.chunks[i]))}));
  const std::string text = json{{"format", kFormat},          {"config", config_hash_}, {"round", round},
                                {"attempt", attempt},         {"offset", offset},       {"values", d.values},
                                {"chunks", std::move(chunks)}}
                               .dump();
  const std::string line = hashed_line(text);
  const std::string header_hash = line.substr(0, 16);
  return write_file_durably(file_of(round), [&](const FileSink& put) -> Status {
    GEOLOCO_TRY(put(std::as_bytes(std::span(line))));
    for (const auto& c : d.chunks) GEOLOCO_TRY(put(std::span<const std::byte>(c)));
    // The last line, once the digest is known (the chunks were written meanwhile).
    auto known = digest();
    if (!known.ok()) return known.status();
    const std::string last_line = hashed_line(json{{"digest", *known}, {"header", header_hash}}.dump());
    return put(std::as_bytes(std::span(last_line)));
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

namespace {

// A hashed line without its newline: its JSON object, the hash checked.
// `what` names the line in errors ("the header", "the last line").
// Errors: mismatch naming `source`.
Result<json> parse_hashed_line(std::string_view line, const std::string& what, const std::string& source) {
  auto damaged = [&](auto&&... why) {
    return GEOLOCO_ERROR(Err::mismatch, source, " is damaged (", why..., "): it is not replayed");
  };
  if (line.size() < 17 || line[16] != ' ') return damaged("no hash before ", what);
  const std::string_view text = line.substr(17);
  if (line.substr(0, 16) != hash_hex(std::as_bytes(std::span(text)))) return damaged(what, "'s hash differs");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return damaged(what, " is not a JSON object");
  return j;
}

// The first line: `<hash> <json>`, the hash checked. Errors: mismatch naming `source`.
Result<json> parse_header_line(std::string_view line, std::uint64_t round, const std::string& config_hash,
                               const std::string& source) {
  auto damaged = [&](auto&&... why) {
    return GEOLOCO_ERROR(Err::mismatch, source, " is damaged (", why..., "): it is not replayed");
  };
  auto parsed = parse_hashed_line(line, "the header", source);
  if (!parsed.ok()) return parsed.status();
  json& h = *parsed;
  try {
    const int format = h.at("format").get<int>();
    if (format != kFormat && format != kFirstFormat)
      return damaged("format ", h.at("format").dump(), ", not ", kFirstFormat, " or ", kFormat);
    GEOLOCO_RETURN_IF(h.at("config").get<std::string>() != config_hash, Err::mismatch, source,
                      " is of another configuration of the job: it is not replayed");
    if (h.at("round").get<std::uint64_t>() != round) return damaged("it holds round ", h.at("round").dump());
    (void)h.at("attempt").get<std::uint64_t>();
    if (format == kFirstFormat) (void)h.at("digest").get<std::string>();
  } catch (const json::exception& x) {
    return damaged("header: ", x.what());
  }
  return parsed;
}

// Format 2's last line, `<hash> <json>` (no newline here): the digest of the
// entry whose first line's hash is `header_hash`. Errors: mismatch naming `source`.
Result<std::string> parse_last_line(std::string_view line, const std::string& header_hash, const std::string& source) {
  auto damaged = [&](auto&&... why) {
    return GEOLOCO_ERROR(Err::mismatch, source, " is damaged (", why..., "): it is not replayed");
  };
  auto parsed = parse_hashed_line(line, "the last line", source);
  if (!parsed.ok()) return parsed.status();
  const json& t = *parsed;
  try {
    if (t.at("header").get<std::string>() != header_hash) return damaged("the last line is another entry's");
    return t.at("digest").get<std::string>();
  } catch (const json::exception& x) {
    return damaged("last line: ", x.what());
  }
}

}  // namespace

Result<RoundDelta> parse_round_delta(std::span<const std::byte> bytes, std::uint64_t round,
                                     const std::string& config_hash, const std::string& source) {
  auto damaged = [&](auto&&... why) {
    return GEOLOCO_ERROR(Err::mismatch, source, " is damaged (", why..., "): it is not replayed");
  };
  const std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto newline = all.find('\n');
  if (newline == std::string_view::npos || newline > kMaxHeaderBytes) return damaged("no complete first line");
  auto header = parse_header_line(all.substr(0, newline), round, config_hash, source);
  if (!header.ok()) return header.status();
  const json& h = *header;
  RoundDelta e;
  std::uint64_t at = newline + 1;
  const std::uint64_t size = bytes.size();
  try {
    e.round = round;
    e.attempt = h.at("attempt").get<std::uint64_t>();
    e.offset = h.at("offset").get<std::uint64_t>();
    e.delta.values = h.at("values").get<std::uint64_t>();
    if (h.at("format").get<int>() == kFirstFormat) e.digest = h.at("digest").get<std::string>();
    std::uint64_t covered = 0;
    for (const auto& c : h.at("chunks")) {
      const transport::Range r{c.at(0).get<std::uint64_t>(), c.at(1).get<std::uint64_t>()};
      if (r.begin != covered) return damaged("a chunk starts at ", r.begin, ", not ", covered);
      if (r.size > e.delta.values - covered) return damaged("a chunk reaches past its ", e.delta.values, " values");
      covered += r.size;
      const std::uint64_t n = c.at(2).get<std::uint64_t>();
      if (n > size - at) return damaged("shorter than its chunks");
      const std::span<const std::byte> chunk = bytes.subspan(at, n);
      at += n;
      if (hash_hex(chunk) != c.at(3).get<std::string>())
        return damaged("chunk ", e.delta.chunks.size(), "'s hash differs");
      e.delta.ranges.push_back(r);
      e.delta.chunks.emplace_back(chunk.begin(), chunk.end());
    }
    if (covered != e.delta.values) return damaged("its chunks cover ", covered, " of ", e.delta.values, " values");
  } catch (const json::exception& x) {
    return damaged("header: ", x.what());
  }
  if (h.at("format").get<int>() == kFirstFormat) {
    if (at != size) return damaged(size - at, " bytes past its chunks");
    return e;
  }
  const std::string_view rest = all.substr(at);
  if (rest.empty() || rest.back() != '\n' || rest.find('\n') != rest.size() - 1 || rest.size() > kMaxLastLineBytes)
    return damaged(rest.size(), " bytes past its chunks, not its last line");
  auto digest = parse_last_line(rest.substr(0, rest.size() - 1), std::string(all.substr(0, 16)), source);
  if (!digest.ok()) return digest.status();
  e.digest = *digest;
  return e;
}

Result<std::optional<RoundDelta>> RoundDeltas::read(std::uint64_t round) const {
  const fs::path path = file_of(round);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<RoundDelta>();
  const std::uint64_t size = fs::file_size(path, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot read ", path.string(), ": ", ec.message());
  std::ifstream in(path, std::ios::binary);
  GEOLOCO_RETURN_IF(!in, Err::io, "cannot open ", path.string());
  Buffer bytes(size);
  GEOLOCO_RETURN_IF(!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)), Err::io,
                    "cannot read ", path.string(), ": it shrank while read");
  auto entry = parse_round_delta(bytes, round, config_hash_, path.string());
  if (!entry.ok()) return entry.status();
  return std::optional<RoundDelta>(std::move(*entry));
}

Result<std::optional<RoundDeltaHeader>> RoundDeltas::header(std::uint64_t round) const {
  const fs::path path = file_of(round);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::optional<RoundDeltaHeader>();
  RoundDeltaHeader out;
  out.round = round;
  out.bytes = fs::file_size(path, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot read ", path.string(), ": ", ec.message());
  std::ifstream in(path, std::ios::binary);
  GEOLOCO_RETURN_IF(!in, Err::io, "cannot open ", path.string());
  std::string line;
  GEOLOCO_RETURN_IF(!std::getline(in, line) || in.eof() || line.size() > kMaxHeaderBytes, Err::mismatch, path.string(),
                    " is damaged (no complete first line): it is not replayed");
  auto h = parse_header_line(line, round, config_hash_, path.string());
  if (!h.ok()) return h.status();
  out.attempt = (*h)["attempt"].get<std::uint64_t>();
  out.hash = line.substr(0, 16);
  if ((*h)["format"].get<int>() == kFirstFormat) {
    out.digest = (*h)["digest"].get<std::string>();
    return std::optional<RoundDeltaHeader>(std::move(out));
  }
  // The digest is in the last line, after the chunks the first line lists.
  std::uint64_t chunks_end = line.size() + 1;
  try {
    for (const auto& c : (*h)["chunks"]) chunks_end += c.at(2).get<std::uint64_t>();
  } catch (const json::exception& x) {
    return Status(Err::mismatch, cat(path.string(), " is damaged (header: ", x.what(), "): it is not replayed"));
  }
  GEOLOCO_RETURN_IF(chunks_end > out.bytes || out.bytes - chunks_end > kMaxLastLineBytes, Err::mismatch, path.string(),
                    " is damaged (", out.bytes, " bytes where its chunks end at ", chunks_end, "): it is not replayed");
  std::string end(out.bytes - chunks_end, '\0');
  in.clear();
  in.seekg(static_cast<std::streamoff>(chunks_end));
  GEOLOCO_RETURN_IF(!in.read(end.data(), static_cast<std::streamsize>(end.size())), Err::io, "cannot read ",
                    path.string(), ": it shrank while read");
  GEOLOCO_RETURN_IF(end.empty() || end.back() != '\n' || end.find('\n') != end.size() - 1, Err::mismatch, path.string(),
                    " is damaged (no complete last line): it is not replayed");
  auto digest = parse_last_line(std::string_view(end).substr(0, end.size() - 1), out.hash, path.string());
  if (!digest.ok()) return digest.status();
  out.digest = *digest;
  return std::optional<RoundDeltaHeader>(std::move(out));
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
