// What a site sends a joining one (docs/design.md §4 "Rejoin"): a committed
// state that cannot change while it is sent, and the committed rounds since,
// as its round log keeps them; or, to a site that holds an older committed
// round, only those rounds, when they are fewer bytes than the state.
//
// The state is sent from the site's checkpoint file, mapped read-only: a new
// checkpoint is renamed over the path, never written into the old file, so
// the mapping keeps the bytes it had (no copy of the model per transfer).
// The round-log entries are opened when the offer is made: a checkpoint that
// cuts the log meanwhile removes their names, not the bytes being sent.
// Rounds that commit during a transfer do not disturb it; the joining site
// asks again for them once the state is in place, and gets only those.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "daemon/control_messages.h"
#include "daemon/journal.h"
#include "daemon/round_deltas.h"
#include "outer/checkpoint.h"
#include "outer/outer_state.h"

namespace geoloco::daemon {

/// A checkpoint file mapped read-only, its anchor digest checked once.
/// A file as fstat(2) sees it. A new checkpoint is a new file renamed over
/// the path, so the same identity means the same bytes.
struct FileIdentity {
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
  /// None when the file cannot be stat'ed.
  static std::optional<FileIdentity> of(const std::filesystem::path& path);
};

class MappedCheckpoint {
 public:
  /// Maps `path` and checks it is a checkpoint of `config_hash` whose anchor
  /// matches its digest: one pass over the anchor, skipped when the file is
  /// `checked` (this site wrote it, or loaded and checked it, and it was not
  /// replaced since). A checkpoint written past the page cache is read from
  /// the disk for that pass, 4 bytes a parameter. Errors: io, and the
  /// checkpoint's own (malformed, mismatch...).
  static Result<std::shared_ptr<const MappedCheckpoint>> open(const std::filesystem::path& path,
                                                              const std::string& config_hash,
                                                              const std::optional<FileIdentity>& checked = {});
  ~MappedCheckpoint();
  MappedCheckpoint(const MappedCheckpoint&) = delete;
  MappedCheckpoint& operator=(const MappedCheckpoint&) = delete;
  const outer::CheckpointView& view() const { return view_; }

 private:
  MappedCheckpoint() = default;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  outer::CheckpointView view_;
};

/// A round-log entry opened for sending.
class OpenDelta {
 public:
  /// Opens round `h.round`'s entry at `path`. Errors: io, mismatch (its size
  /// is not the header's: it was replaced since).
  static Result<std::shared_ptr<const OpenDelta>> open(const std::filesystem::path& path, const RoundDeltaHeader& h);
  ~OpenDelta();
  OpenDelta(const OpenDelta&) = delete;
  OpenDelta& operator=(const OpenDelta&) = delete;
  const RoundDeltaHeader& header() const { return header_; }
  /// `out.size()` bytes from `offset`. Errors: io.
  Status read(std::uint64_t offset, std::span<std::byte> out) const;

 private:
  OpenDelta() = default;
  int fd_ = -1;
  std::filesystem::path path_;
  RoundDeltaHeader header_;
};

/// The bytes of one offer: a base state (a mapped checkpoint or an owned
/// copy), or none when the asker's own state is the base, then entries.
class StateSource {
 public:
  /// A copy of `state` (a site that cannot map a checkpoint of it sends this).
  static std::shared_ptr<const StateSource> copy_of(const outer::OuterState& state);
  /// `checkpoint`'s state, then `deltas` (the rounds after its, in order).
  static std::shared_ptr<const StateSource> of(std::shared_ptr<const MappedCheckpoint> checkpoint,
                                               std::vector<std::shared_ptr<const OpenDelta>> deltas);
  /// Only `deltas`, from the asker's own state of `base_round` (`base_digest`).
  static std::shared_ptr<const StateSource> from_held(std::uint64_t base_round, std::string base_digest,
                                                      std::uint64_t values, Layout layout,
                                                      std::vector<std::shared_ptr<const OpenDelta>> deltas);

  /// The round the asker holds once everything is in, and its anchor digest.
  std::uint64_t round() const;
  std::string digest() const;
  /// The offer of it for job `job`, `chunk_values` values to a state frame.
  StateOfferMessage offer(const std::string& job, std::uint64_t chunk_values) const;
  /// Frame `i` of that offer (state_sync.h's numbering). Errors: io, and
  /// invalid_argument for a frame the offer does not have.
  Result<std::span<const std::byte>> frame(const StateOfferMessage& offer, std::uint64_t i, Buffer& scratch) const;
  /// Bytes the frames carry, headers not counted.
  std::uint64_t bytes() const;

 private:
  StateSource() = default;
  std::shared_ptr<const MappedCheckpoint> checkpoint_;
  std::shared_ptr<const outer::OuterState> copy_;
  std::span<const float> anchor_, momentum_;
  std::uint64_t base_round_ = 0;
  std::string base_digest_, momentum_digest_;
  std::uint64_t values_ = 0;
  Layout layout_;
  bool from_held_ = false;
  std::vector<std::shared_ptr<const OpenDelta>> deltas_;
};

/// What a holder of round `held` sends an asker (a pure decision).
struct SourcePlan {
  enum Kind {
    deltas_from_held,       ///< the asker's round, then `rounds` from the log (none: it holds `held`)
    checkpoint_and_deltas,  ///< the checkpoint's round `base`, then `rounds`
    checkpoint_now,         ///< a checkpoint of `held` is written first and sent alone
  };
  Kind kind = checkpoint_now;
  std::uint64_t base = 0;
  std::vector<std::uint64_t> rounds;
  std::uint64_t bytes = 0;  ///< what it sends: 8 B per parameter for a state, plus the entries
};

/// A state of round `round` whose anchor digest is `digest`.
struct RoundAt {
  std::uint64_t round = 0;
  std::string digest;
};

/// The cheapest in bytes of: the entries from the asker's round (when it
/// holds a committed one the log reaches from; none when it holds `held`
/// itself), and the state of `held`
/// (8 B per parameter): from the checkpoint on disk with the entries since
/// it when they add at most a quarter to the state, else from a checkpoint
/// written now. At most kMaxOfferedDeltas entries.
/// An entry is used only when it is the committed outcome (`commits`'
/// digest); a checkpoint only when its digest is its round's (round 0: the
/// job's start, whose digest the journal does not hold).
SourcePlan plan_state_source(const RoundAt& held, const std::optional<RoundAt>& asker,
                             const std::optional<RoundAt>& checkpoint,
                             const std::map<std::uint64_t, JournaledCommit>& commits,
                             const std::map<std::uint64_t, RoundDeltaHeader>& log, std::uint64_t values);

}  // namespace geoloco::daemon
