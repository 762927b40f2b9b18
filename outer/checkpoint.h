// Crash-safe checkpoints of the outer state (docs/design.md §4 "Crash safety", §7),
// in the safetensors format so that any tool (and python/geoloco/checkpoint.py
// with numpy alone) can read them:
//
//   u64 LE header length N | N bytes of JSON | tensor data (fp32 LE)
//
// The JSON maps each tensor name to {"dtype": "F32", "shape": [n],
// "data_offsets": [begin, end]} (relative to the data section), plus
// "__metadata__": string → string with format = "geoloco.outer",
// format_version, job, round, config_hash, layout (a JSON list of
// {name, shape}) and an xxh3 digest per tensor. Tensors: "anchor",
// "momentum", and "residual/<site>" per held residual.
//
// Writing is atomic: the bytes go to "<path>.tmp", which is fsynced, renamed
// over <path>, and the directory is fsynced; a kill -9 at any instant leaves
// either the complete old or the complete new checkpoint at <path>.
// Loading trusts nothing: every length, offset, dtype and shape is checked
// against the file's real size before anything is allocated or read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "outer/outer_state.h"

namespace geoloco::outer {

inline constexpr std::string_view kCheckpointFormat = "geoloco.outer";
inline constexpr std::string_view kCheckpointFormatVersion = "1";

struct CheckpointLimits {
  /// Largest JSON header accepted, in bytes (safetensors' own bound is 100 MB).
  std::uint64_t max_header_bytes = 100ull << 20;
};

struct LoadedCheckpoint {
  OuterState state;
  std::string config_hash;  ///< as saved: the job's configuration digest
};

/// Saves `state` atomically at `path`. `config_hash` identifies the job
/// configuration (a resumed job compares it). Errors: invalid_argument
/// (state.validate()'s rules), io (naming the call and errno text).
Status save_checkpoint(const std::filesystem::path& path, const OuterState& state, std::string_view config_hash);

/// The state a checkpoint saves, viewed where it lies: geolocod writes the
/// state it keeps in memory from another thread, without a copy, and
/// changes none of it until the save has returned.
struct CheckpointSource {
  std::string job;
  std::uint64_t round = 0;
  Layout layout;
  std::span<const float> anchor, momentum;
  std::vector<std::pair<std::string, std::span<const float>>> residuals;  ///< (site, values)
};
/// The same file as save_checkpoint() of the OuterState it views, bit for
/// bit. Errors: as save_checkpoint() (OuterState::validate()'s rules).
Status save_checkpoint(const std::filesystem::path& path, const CheckpointSource& state, std::string_view config_hash);

/// Loads and checks a checkpoint. Errors: io (cannot open or read),
/// truncated (shorter than its header says), malformed (bad JSON, bad
/// fields, overlapping or missing ranges), mismatch (a safetensors file that
/// is not a geoloco outer checkpoint, or digests that disagree: a corrupted
/// file), unsupported (another format version or dtype), too_large (a header
/// over the limit). Messages name the file and the broken rule.
Result<LoadedCheckpoint> load_checkpoint(const std::filesystem::path& path, const CheckpointLimits& limits = {});

/// As load_checkpoint, from bytes in memory; `source` names them in messages.
Result<LoadedCheckpoint> parse_checkpoint(std::span<const std::byte> bytes, std::string_view source,
                                          const CheckpointLimits& limits = {});

/// A checkpoint's anchor and momentum where they lie in `bytes` (a mapped
/// file), not copied: what a site sends a joining one (daemon/state_source.h).
struct CheckpointView {
  std::string job;
  std::string config_hash;
  std::uint64_t round = 0;
  Layout layout;
  std::span<const float> anchor;  ///< into the bytes viewed
  std::span<const float> momentum;
  std::string anchor_digest;  ///< as the file's metadata says; not checked here
  std::string momentum_digest;
};

/// As parse_checkpoint's checks of the header and the ranges, without
/// reading the tensors: `bytes` must outlive the view. Errors: as
/// parse_checkpoint's, but a tensor's digest is not checked.
Result<CheckpointView> view_checkpoint(std::span<const std::byte> bytes, std::string_view source,
                                       const CheckpointLimits& limits = {});

}  // namespace geoloco::outer
