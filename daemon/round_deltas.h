// A site's log of the averaged Δ of every round it voted for
// (<job dir>/deltas/), what makes a committed round durable whatever
// `checkpoint.every_rounds` says (docs/design.md §4, crash safety).
//
// Before a site sends COMMIT for a round, it writes the round's averaged Δ
// here as the all-gather's encoded chunks, the bytes every site decoded
// (about 1 byte per parameter with q8, 4 raw), and makes them durable. A
// round commits only with a majority holding its outcome, so a committed
// round is on the disk of every site that voted for it; after any crash a
// site rebuilds its committed state from its last checkpoint by stepping
// these rounds again (round_replay.h). Checkpoints only bound the replay:
// each one cuts the log through the checkpoint interval before its round
// (the rounds since the checkpoint before it stay, so a peer that fell
// behind by less than an interval gets only those: state_source.h).
//
// One file per round, `round-<round>.delta`, written as a temp file,
// fdatasync'd and renamed into place (the folder fsync'd), so a file under
// its final name is whole. A later attempt of the same round replaces it.
// Format 2: a first line `<xxh3-64 hex of the JSON> <JSON>\n` naming the
// round, attempt, range, the job's configuration and every chunk (its
// values, its bytes, their xxh3-64); the chunks' bytes back to back; and a
// last line `<xxh3-64 hex> {"digest": <the anchor digest this site computed
// from it>, "header": <the first line's hash>}\n`. The digest comes last so
// that the chunks go to the disk while the digest pass runs (job_round.cpp).
// Format 1 (still read) had the digest in the first line and no last line.
// Reading checks every hash and the file's exact length: a damaged file is
// refused, never stepped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/allreduce.h"

namespace geoloco::daemon {

inline constexpr const char* kRoundDeltasFolder = "deltas";

/// One round's entry.
struct RoundDelta {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::uint64_t offset = 0;  ///< where the round's range starts in the anchor (a streaming fragment)
  std::string digest;        ///< the anchor digest this site computed from it, and voted
  /// values, ranges and chunks; the pipeline is the job's (the entry names its configuration).
  transport::EncodedOutput delta;
};

/// What an entry's first and last lines say, and its size: enough to offer
/// it to a peer without reading its chunks.
struct RoundDeltaHeader {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::string digest;       ///< the anchor digest its round gives
  std::uint64_t bytes = 0;  ///< the file's size
  std::string hash;         ///< the first line's xxh3 (it covers every chunk's hash): the entry's identity
                            ///< (format 2's last line names it, with the digest)
};

/// An entry's bytes (a file's, or a peer's copy of one) as round `round`'s
/// entry of a job whose configuration hash is `config_hash`; `source`
/// names them in errors. Errors: mismatch (damaged: every hash and the
/// exact length are checked; another configuration).
Result<RoundDelta> parse_round_delta(std::span<const std::byte> bytes, std::uint64_t round,
                                     const std::string& config_hash, const std::string& source);

class RoundDeltas {
 public:
  /// Opens (creating) the folder `dir` of a job whose configuration hash is
  /// `config_hash`; removes temp files a crash left. Errors: io.
  static Result<RoundDeltas> open(const std::filesystem::path& dir, std::string config_hash);

  /// Writes the entry of `round` (its `attempt`, the range's `offset`, the
  /// anchor `digest` this site computed from `delta`) and returns once it is
  /// durable (file and folder synced). On error nothing is left under its
  /// name but what was there before (an earlier attempt's). Errors: io.
  Status append(std::uint64_t round, std::uint64_t attempt, std::uint64_t offset, const std::string& digest,
                const transport::EncodedOutput& delta);
  /// The same, with the digest asked for once the chunks are written (it
  /// may block until another thread has computed it). A digest that is an
  /// error leaves no entry and is returned.
  Status append(std::uint64_t round, std::uint64_t attempt, std::uint64_t offset,
                const std::function<Result<std::string>()>& digest, const transport::EncodedOutput& delta);
  /// The rounds that have an entry, in order.
  std::vector<std::uint64_t> rounds() const;
  /// Round `round`'s entry; none when there is no file. Errors: io, and
  /// mismatch for a damaged file or one of another configuration (named).
  Result<std::optional<RoundDelta>> read(std::uint64_t round) const;
  /// Round `round`'s first and last lines and size; none when there is no file.
  /// Errors: io, mismatch (a damaged line, another configuration).
  Result<std::optional<RoundDeltaHeader>> header(std::uint64_t round) const;
  /// Where round `round`'s entry is (whether or not it exists).
  std::filesystem::path file(std::uint64_t round) const { return file_of(round); }
  /// Removes the entries of rounds up to `round` (a checkpoint holds them).
  /// Errors: io (what could not be removed is named; the rest is removed).
  Status cut_through(std::uint64_t round);
  /// Bytes of the entries on disk.
  std::uint64_t bytes() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  RoundDeltas(std::filesystem::path dir, std::string config_hash)
      : dir_(std::move(dir)), config_hash_(std::move(config_hash)) {}
  std::filesystem::path file_of(std::uint64_t round) const;
  std::filesystem::path dir_;
  std::string config_hash_;
};

}  // namespace geoloco::daemon
