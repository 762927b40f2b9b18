#include "outer/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/digest.h"
#include "common/durable_file.h"

namespace geoloco::outer {

namespace {

using nlohmann::json;

constexpr std::string_view kResidualPrefix = "residual/";

Status errno_status(std::string_view what, const std::filesystem::path& path) {
  return GEOLOCO_ERROR(Err::io, what, " ", path.string(), ": ", std::strerror(errno));
}

// Closes a descriptor on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

json tensor_entry(std::uint64_t count, std::uint64_t& offset) {
  json e;
  e["dtype"] = "F32";
  e["shape"] = json::array({count});
  e["data_offsets"] = json::array({offset, offset + count * 4});
  offset += count * 4;
  return e;
}

// Where the bytes of a checkpoint come from: a file (read piecewise, so a
// large model is never read twice into memory) or a buffer.
class Source {
 public:
  virtual ~Source() = default;
  virtual std::uint64_t size() const = 0;
  virtual Status read(std::uint64_t offset, std::span<std::byte> out) = 0;
};

class MemorySource : public Source {
 public:
  explicit MemorySource(std::span<const std::byte> bytes) : bytes_(bytes) {}
  std::uint64_t size() const override { return bytes_.size(); }
  Status read(std::uint64_t offset, std::span<std::byte> out) override {
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
    return {};
  }

 private:
  std::span<const std::byte> bytes_;
};

class FileSource : public Source {
 public:
  FileSource(int fd, std::uint64_t size, std::filesystem::path path) : fd_(fd), size_(size), path_(std::move(path)) {}
  std::uint64_t size() const override { return size_; }
  Status read(std::uint64_t offset, std::span<std::byte> out) override {
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd_, out.data() + done, std::min<std::size_t>(out.size() - done, 1u << 30),
                                static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_status("cannot read", path_);
      }
      GEOLOCO_RETURN_IF(n == 0, Err::truncated, path_.string(), ": the file ended while reading (it shrank?)");
      done += static_cast<std::size_t>(n);
    }
    return {};
  }

 private:
  int fd_;
  std::uint64_t size_;
  std::filesystem::path path_;
};

struct TensorRange {
  std::string name;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t count = 0;
};

Result<std::string> meta_string(const json& meta, const char* key, std::string_view source) {
  auto it = meta.find(key);
  GEOLOCO_RETURN_IF(it == meta.end(), Err::malformed, source, ": __metadata__ has no '", key, "'");
  GEOLOCO_RETURN_IF(!it->is_string(), Err::malformed, source, ": __metadata__.", key, " must be a string");
  return it->get<std::string>();
}

Result<std::uint64_t> parse_u64(const std::string& text, std::string_view what, std::string_view source) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  GEOLOCO_RETURN_IF(text.empty() || ec != std::errc() || end != text.data() + text.size(), Err::malformed, source, ": ",
                    what, " '", text, "' is not an unsigned decimal integer");
  return v;
}

Result<Layout> parse_layout(const std::string& text, std::string_view source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  GEOLOCO_RETURN_IF(j.is_discarded() || !j.is_array(), Err::malformed, source,
                    ": __metadata__.layout must be a JSON list of {name, shape}");
  Layout layout;
  std::uint64_t offset = 0;
  for (const auto& t : j) {
    GEOLOCO_RETURN_IF(!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("shape") ||
                          !t["shape"].is_array(),
                      Err::malformed, source, ": __metadata__.layout entry ", layout.size(),
                      " must be {\"name\": string, \"shape\": [unsigned, ...]}");
    TensorDesc info;
    info.name = t["name"].get<std::string>();
    info.offset = offset;
    for (const auto& d : t["shape"]) {
      GEOLOCO_RETURN_IF(!d.is_number_unsigned(), Err::malformed, source, ": __metadata__.layout tensor '", info.name,
                        "' has a dimension that is not an unsigned integer");
      info.shape.push_back(d.get<std::uint64_t>());
    }
    offset +=
        info.size();  // may wrap: check_layout refuses the first tensor past its bound before any such offset is used
    layout.push_back(std::move(info));
  }
  Status valid = check_layout(layout);
  GEOLOCO_RETURN_IF(!valid.ok(), Err::malformed, source, ": __metadata__.layout: ", valid.message());
  return layout;
}

// What a checkpoint's header says, every range checked against the file's size.
struct Index {
  json meta;
  std::string job;
  std::string config_hash;
  std::uint64_t round = 0;
  Layout layout;
  std::uint64_t data_start = 0;
  std::vector<TensorRange> ranges;  ///< in file order, tiling the data section
};

Result<Index> index(Source& src, std::string_view source, const CheckpointLimits& limits) {
  const std::uint64_t file_size = src.size();
  GEOLOCO_RETURN_IF(file_size < 8, Err::truncated, source, ": ", file_size,
                    " bytes, shorter than the 8-byte safetensors header length");
  std::array<std::byte, 8> len_bytes{};
  GEOLOCO_TRY(src.read(0, len_bytes));
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, len_bytes.data(), 8);  // little-endian hosts only (x86-64, aarch64)
  GEOLOCO_RETURN_IF(header_len > limits.max_header_bytes, Err::too_large, source, ": header length ", header_len,
                    " is over the bound of ", limits.max_header_bytes, " bytes (not a checkpoint, or corrupted)");
  GEOLOCO_RETURN_IF(header_len > file_size - 8, Err::truncated, source, ": header says ", header_len,
                    " bytes of JSON but the file has only ", file_size - 8, " after the length");
  std::string header_text(header_len, '\0');
  GEOLOCO_TRY(src.read(8, std::as_writable_bytes(std::span(header_text))));
  json header = json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  GEOLOCO_RETURN_IF(header.is_discarded() || !header.is_object(), Err::malformed, source,
                    ": the safetensors header is not a JSON object");

  auto meta_it = header.find("__metadata__");
  GEOLOCO_RETURN_IF(meta_it == header.end() || !meta_it->is_object() || !meta_it->contains("format") ||
                        (*meta_it)["format"] != kCheckpointFormat,
                    Err::mismatch, source, ": not a geoloco outer checkpoint (a safetensors file without __metadata__",
                    ".format = \"", kCheckpointFormat, "\")");
  const json& meta = *meta_it;
  auto version = meta_string(meta, "format_version", source);
  if (!version.ok()) return version.status();
  GEOLOCO_RETURN_IF(*version != kCheckpointFormatVersion, Err::unsupported, source, ": format version ", *version,
                    "; this build reads version ", kCheckpointFormatVersion);
  for (const auto& [key, value] : meta.items()) {
    GEOLOCO_RETURN_IF(!value.is_string(), Err::malformed, source, ": __metadata__.", key,
                      " must be a string (safetensors metadata is string to string)");
  }
  auto job = meta_string(meta, "job", source);
  if (!job.ok()) return job.status();
  auto round_text = meta_string(meta, "round", source);
  if (!round_text.ok()) return round_text.status();
  auto round = parse_u64(*round_text, "__metadata__.round", source);
  if (!round.ok()) return round.status();
  auto config_hash = meta_string(meta, "config_hash", source);
  if (!config_hash.ok()) return config_hash.status();
  auto layout_text = meta_string(meta, "layout", source);
  if (!layout_text.ok()) return layout_text.status();
  auto layout = parse_layout(*layout_text, source);
  if (!layout.ok()) return layout.status();

  // Every tensor entry, checked against the data section's real size.
  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_size = file_size - data_start;
  std::vector<TensorRange> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    GEOLOCO_RETURN_IF(!entry.is_object(), Err::malformed, source, ": tensor '", name, "' is not a JSON object");
    GEOLOCO_RETURN_IF(!entry.contains("dtype") || !entry["dtype"].is_string(), Err::malformed, source, ": tensor '",
                      name, "' has no dtype");
    GEOLOCO_RETURN_IF(entry["dtype"] != "F32", Err::unsupported, source, ": tensor '", name, "' has dtype ",
                      entry["dtype"].get<std::string>(), "; outer state is F32");
    GEOLOCO_RETURN_IF(!entry.contains("shape") || !entry["shape"].is_array() || entry["shape"].size() != 1 ||
                          !entry["shape"][0].is_number_unsigned(),
                      Err::malformed, source, ": tensor '", name, "' must have a 1-D shape [n]");
    GEOLOCO_RETURN_IF(!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
                          entry["data_offsets"].size() != 2 || !entry["data_offsets"][0].is_number_unsigned() ||
                          !entry["data_offsets"][1].is_number_unsigned(),
                      Err::malformed, source, ": tensor '", name, "' must have data_offsets [begin, end]");
    TensorRange r;
    r.name = name;
    r.count = entry["shape"][0].get<std::uint64_t>();
    r.begin = entry["data_offsets"][0].get<std::uint64_t>();
    r.end = entry["data_offsets"][1].get<std::uint64_t>();
    GEOLOCO_RETURN_IF(r.begin > r.end, Err::malformed, source, ": tensor '", name, "' has data_offsets [", r.begin,
                      ", ", r.end, "] that run backwards");
    GEOLOCO_RETURN_IF(r.count > (r.end - r.begin) / 4 || r.end - r.begin != r.count * 4, Err::malformed, source,
                      ": tensor '", name, "' has shape [", r.count, "] (", r.count, " x 4 bytes) but data_offsets [",
                      r.begin, ", ", r.end, "]");
    GEOLOCO_RETURN_IF(r.end > data_size, Err::truncated, source, ": tensor '", name, "' ends at byte ", r.end,
                      " of the data section, but the file holds only ", data_size, " bytes of data (truncated)");
    ranges.push_back(std::move(r));
  }
  // safetensors requires the ranges to tile the data section exactly.
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  std::uint64_t expect = 0;
  for (const auto& r : ranges) {
    GEOLOCO_RETURN_IF(r.begin != expect, Err::malformed, source, ": tensor '", r.name, "' starts at byte ", r.begin,
                      " of the data section, expected ", expect, " (ranges must not overlap or leave holes)");
    expect = r.end;
  }
  GEOLOCO_RETURN_IF(expect != data_size, Err::malformed, source, ": ", data_size - expect,
                    " bytes follow the last tensor; the file is not what its header describes");
  Index out;
  out.meta = meta;
  out.job = std::move(job).value();
  out.config_hash = std::move(config_hash).value();
  out.round = *round;
  out.layout = std::move(layout).value();
  out.data_start = data_start;
  out.ranges = std::move(ranges);
  return out;
}

Result<LoadedCheckpoint> parse(Source& src, std::string_view source, const CheckpointLimits& limits) {
  auto indexed = index(src, source, limits);
  if (!indexed.ok()) return indexed.status();
  const json& meta = indexed->meta;
  const std::uint64_t data_start = indexed->data_start;
  LoadedCheckpoint out;
  out.config_hash = std::move(indexed->config_hash);
  OuterState& state = out.state;
  state.job = std::move(indexed->job);
  state.round = indexed->round;
  state.layout = std::move(indexed->layout);
  const std::uint64_t n = layout_values(state.layout);
  bool have_anchor = false, have_momentum = false;
  for (const auto& r : indexed->ranges) {
    std::vector<float>* target = nullptr;
    if (r.name == "anchor") {
      target = &state.anchor;
      have_anchor = true;
    } else if (r.name == "momentum") {
      target = &state.momentum;
      have_momentum = true;
    } else if (r.name.starts_with(kResidualPrefix) && r.name.size() > kResidualPrefix.size()) {
      state.residuals.push_back({r.name.substr(kResidualPrefix.size()), {}});
      target = &state.residuals.back().values;
    } else {
      return GEOLOCO_ERROR(Err::malformed, source, ": unknown tensor '", r.name,
                           "' (expected anchor, momentum, residual/<site>)");
    }
    // Sizes are checked before allocating: the header cannot make us
    // allocate more than the layout (itself bounded) says.
    GEOLOCO_RETURN_IF(r.count != n, Err::malformed, source, ": tensor '", r.name, "' has ", r.count,
                      " values but the layout has ", n);
    auto digest = meta_string(meta, cat("digest.", r.name).c_str(), source);
    if (!digest.ok()) return digest.status();
    target->resize(r.count);
    GEOLOCO_TRY(src.read(data_start + r.begin, std::as_writable_bytes(std::span(*target))));
    GEOLOCO_RETURN_IF(digest_hex(digest_f32(*target)) != *digest, Err::mismatch, source, ": tensor '", r.name,
                      "' does not match its digest ", *digest, " (the file is corrupted)");
  }
  GEOLOCO_RETURN_IF(!have_anchor || !have_momentum, Err::malformed, source,
                    ": a checkpoint needs both 'anchor' and 'momentum' tensors");
  std::sort(state.residuals.begin(), state.residuals.end(),
            [](const auto& a, const auto& b) { return a.site < b.site; });
  Status valid = state.validate();
  GEOLOCO_RETURN_IF(!valid.ok(), Err::malformed, source, ": ", valid.message());
  return out;
}

}  // namespace

Status save_checkpoint(const std::filesystem::path& path, const OuterState& state, std::string_view config_hash) {
  GEOLOCO_TRY(state.validate());
  CheckpointSource source{state.job, state.round, state.layout, state.anchor, state.momentum, {}};
  for (const auto& r : state.residuals) source.residuals.emplace_back(r.site, r.values);
  return save_checkpoint(path, source, config_hash);
}

Status save_checkpoint(const std::filesystem::path& path, const CheckpointSource& state, std::string_view config_hash) {
  // OuterState::validate()'s rules, on the views.
  GEOLOCO_RETURN_IF(state.job.empty(), Err::invalid_argument, "outer state: the job name is empty");
  GEOLOCO_TRY(check_layout(state.layout));
  const std::uint64_t n = layout_values(state.layout);
  GEOLOCO_RETURN_IF(state.anchor.size() != n, Err::invalid_argument, "outer state: anchor has ", state.anchor.size(),
                    " values but the layout has ", n);
  GEOLOCO_RETURN_IF(state.momentum.size() != n, Err::invalid_argument, "outer state: momentum has ",
                    state.momentum.size(), " values but the layout has ", n);
  std::set<std::string> sites;
  for (const auto& [site, values] : state.residuals) {
    GEOLOCO_RETURN_IF(site.empty(), Err::invalid_argument, "outer state: a residual has an empty site name");
    GEOLOCO_RETURN_IF(!sites.insert(site).second, Err::invalid_argument, "outer state: site '", site,
                      "' has two residuals");
    GEOLOCO_RETURN_IF(values.size() != n, Err::invalid_argument, "outer state: residual of site '", site, "' has ",
                      values.size(), " values but the layout has ", n);
  }
  json layout = json::array();
  for (const auto& t : state.layout) layout.push_back({{"name", t.name}, {"shape", t.shape}});

  // Residuals in site order, so the same state always gives the same bytes.
  std::vector<const std::pair<std::string, std::span<const float>>*> residuals;
  for (const auto& r : state.residuals) residuals.push_back(&r);
  std::sort(residuals.begin(), residuals.end(), [](auto* a, auto* b) { return a->first < b->first; });

  json header;
  json meta;
  meta["format"] = kCheckpointFormat;
  meta["format_version"] = kCheckpointFormatVersion;
  meta["job"] = state.job;
  meta["round"] = std::to_string(state.round);
  meta["config_hash"] = config_hash;
  meta["layout"] = layout.dump();
  std::uint64_t offset = 0;
  header["anchor"] = tensor_entry(state.anchor.size(), offset);
  meta["digest.anchor"] = digest_hex(digest_f32(state.anchor));
  header["momentum"] = tensor_entry(state.momentum.size(), offset);
  meta["digest.momentum"] = digest_hex(digest_f32(state.momentum));
  for (const auto* r : residuals) {
    const std::string name = cat(kResidualPrefix, r->first);
    header[name] = tensor_entry(r->second.size(), offset);
    meta[cat("digest.", name)] = digest_hex(digest_f32(r->second));
  }
  header["__metadata__"] = meta;
  std::string text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned, as safetensors writers do.
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t header_len = text.size();

  // Written whole or not at all: a full disk (or any failed write) leaves
  // the last checkpoint as it was and no half-written file next to it.
  return write_file_durably(path, [&](const FileSink& put) -> Status {
    GEOLOCO_TRY(put(std::as_bytes(std::span(&header_len, 1))));
    GEOLOCO_TRY(put(std::as_bytes(std::span(text))));
    GEOLOCO_TRY(put(std::as_bytes(state.anchor)));
    GEOLOCO_TRY(put(std::as_bytes(state.momentum)));
    for (const auto* r : residuals) GEOLOCO_TRY(put(std::as_bytes(r->second)));
    return {};
  });
}

Result<LoadedCheckpoint> load_checkpoint(const std::filesystem::path& path, const CheckpointLimits& limits) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno_status("cannot open checkpoint", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_status("cannot stat", path);
  GEOLOCO_RETURN_IF(!S_ISREG(st.st_mode), Err::io, path.string(), ": not a regular file");
  FileSource src(fd.get(), static_cast<std::uint64_t>(st.st_size), path);
  return parse(src, path.string(), limits);
}

Result<LoadedCheckpoint> parse_checkpoint(std::span<const std::byte> bytes, std::string_view source,
                                          const CheckpointLimits& limits) {
  MemorySource src(bytes);
  return parse(src, source, limits);
}

Result<CheckpointView> view_checkpoint(std::span<const std::byte> bytes, std::string_view source,
                                       const CheckpointLimits& limits) {
  MemorySource src(bytes);
  auto indexed = index(src, source, limits);
  if (!indexed.ok()) return indexed.status();
  CheckpointView view;
  view.job = indexed->job;
  view.config_hash = indexed->config_hash;
  view.round = indexed->round;
  view.layout = indexed->layout;
  const std::uint64_t n = layout_values(view.layout);
  for (const auto& r : indexed->ranges) {
    if (r.name != "anchor" && r.name != "momentum") continue;
    GEOLOCO_RETURN_IF(r.count != n, Err::malformed, source, ": tensor '", r.name, "' has ", r.count,
                      " values but the layout has ", n);
    const std::byte* at = bytes.data() + indexed->data_start + r.begin;
    GEOLOCO_RETURN_IF(reinterpret_cast<std::uintptr_t>(at) % alignof(float) != 0, Err::malformed, source, ": tensor '",
                      r.name, "' is not aligned for float values");
    auto digest = meta_string(indexed->meta, cat("digest.", r.name).c_str(), source);
    if (!digest.ok()) return digest.status();
    const std::span<const float> values(reinterpret_cast<const float*>(at), r.count);
    if (r.name == "anchor") {
      view.anchor = values;
      view.anchor_digest = *digest;
    } else {
      view.momentum = values;
      view.momentum_digest = *digest;
    }
  }
  GEOLOCO_RETURN_IF(view.anchor_digest.empty() || view.momentum_digest.empty(), Err::malformed, source,
                    ": a checkpoint needs both 'anchor' and 'momentum' tensors");
  return view;
}

}  // namespace geoloco::outer
