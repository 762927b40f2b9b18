// What one round cost this site, as geolocod measures it: CPU seconds by
// stage, the passes over the averaged Δ and over this site's contribution,
// and the checkpoint saved after the round. Shown in the round's record
// (`geoloco status --json`, `costs`) and as metrics; not kept in the round
// log on disk (they describe the process that ran the round).
//
// The stages' CPU is the thread's own that ran them (thread CPU around each
// call: the daemon thread's, or for the digest pass the thread it runs on
// beside the event loop) plus that of a pass's helper threads
// (diloco/chunk_pass.h), except `transfer`: the process's CPU over the all-reduce, every thread
// (the connections' TLS and socket work), less the encodes and decodes the
// all-reduce did on the daemon thread.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace geoloco::daemon {

struct RoundCosts {
  double encode = 0;    ///< this site's contributions made (Δ = anchor − replica) and encoded
  double transfer = 0;  ///< the all-reduce's other CPU, every thread: TLS, frames, sockets
  double decode_average =
      0;              ///< contributions decoded and averaged, the average encoded (owner), every gathered chunk decoded
  double clip = 0;    ///< the norm of the averaged Δ and its clip scale
  double digest = 0;  ///< the digest of the anchor the step will give (the COMMIT's)
  double round_log = 0;   ///< the averaged Δ appended to the round log, fsync'd before the vote
  double feedback = 0;    ///< the residual of an earlier attempt not kept, zeroed (0 when every round is kept)
  double outer_step = 0;  ///< the outer step of the anchor and momentum
  double history = 0;     ///< the round's record, history event and journal record
  double checkpoint = 0;  ///< the checkpoint saved after this round (0: none)

  double round_log_seconds = 0;        ///< wall time of the round log's append (its fsyncs), beside the digest pass
  double round_log_wait_seconds = 0;   ///< of which the vote waited after the digest was known
  double checkpoint_wait_seconds = 0;  ///< the exchange waited this long for the last checkpoint to be written
  /// The longest the daemon's event loop was held at once from the
  /// exchange's start to the step's end (a timer on it fired this late, or
  /// the step on it took this long): what heartbeats and peers waited.
  double loop_busy_seconds = 0;
  std::optional<double> checkpoint_seconds;  ///< wall time of the checkpoint after this round, if one was saved
  std::uint64_t checkpoint_bytes = 0;

  std::uint64_t values = 0;                   ///< the round's range: the averaged Δ's values
  std::uint64_t averaged_values_decoded = 0;  ///< values of the averaged Δ decoded in the round, every pass
  std::uint64_t own_values = 0;               ///< this site's contribution (0: an observer)
  std::uint64_t values_encoded = 0;           ///< values of the contribution encoded, every pass

  /// The stages' CPU seconds summed.
  double cpu_seconds() const;
  /// Passes over the averaged Δ: decoded values over the range (0 when empty).
  double decodes_per_chunk() const;
  /// Passes over this site's contribution: encoded values over its length (0 for an observer).
  double encodes_per_chunk() const;
};

/// The stages in the round's order, each with its name in JSON and metrics.
struct CostStage {
  std::string_view name;
  double RoundCosts::*seconds;
};
extern const std::array<CostStage, 10> kCostStages;

/// {"cpu_seconds": {stage: s, ..., "total": s}, "decodes_per_chunk", "encodes_per_chunk",
///  "values", "round_log_seconds", "round_log_wait_seconds", "checkpoint_wait_seconds", "loop_busy_seconds",
///  "checkpoint_seconds" (null: none), "checkpoint_bytes"}.
nlohmann::json costs_json(const RoundCosts& costs);

}  // namespace geoloco::daemon
