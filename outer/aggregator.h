// Weighted aggregation of the sites' decoded pseudo-gradients, chunk by chunk
// (DESIGN §1 step 4, §3):
//
//   Δ = Σ_s w_s D(c_s) / Σ_s w_s      over the round's participants
//
// The transport delivers chunks from different sites in any order. Floating
// point addition is not associative, so summing in arrival order would make
// the anchor depend on network timing. Instead a chunk's decoded
// contributions wait in per-site slots until every participant's copy of
// that chunk has arrived, and the chunk is then reduced in site order, with
// normalized weights p_s = w_s / Σ w, in double, rounded once to fp32. The
// result is bit-identical whatever the arrival order, and memory is bounded
// by the chunks in flight (participants × chunk × 4 bytes each), never the
// whole tensor.
//
// One weight means p = 1 exactly, so a single participant's Δ passes through
// unchanged; k participants with equal Δ give that Δ back (the double sum is
// within a few ulp of double of a float value, which rounds back to it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "compression/chunked.h"
#include "compression/pipeline.h"

namespace geoloco::outer {

/// A site in the round's PLAN and its weight (straggler.h decides it).
struct Participant {
  std::uint32_t site = 0;
  double weight = 1.0;  ///< > 0 and finite; only ratios matter
};

class ChunkAggregator {
 public:
  /// Errors: invalid_argument (no participants, a weight that is not finite
  /// and > 0, a site listed twice, an empty layout, max_chunks_in_flight 0).
  static Result<ChunkAggregator> create(compression::ChunkLayout layout, std::vector<Participant> participants,
                                        std::uint64_t max_chunks_in_flight = 64);

  /// Decodes `payload`, site `site`'s copy of chunk `chunk`, with `pipeline`
  /// and keeps it. When this was the chunk's last missing copy, returns the
  /// reduced chunk (layout.length(chunk) values; the view is valid until the
  /// next call), otherwise nullopt. Errors: invalid_argument (a site not in
  /// the PLAN, a chunk index out of range), mismatch (a copy already
  /// received, or a chunk already reduced: a replayed frame), too_large (a new
  /// chunk would exceed max_chunks_in_flight), and Pipeline::decode's. On
  /// error nothing changes.
  Result<std::optional<std::span<const float>>> add_payload(std::uint32_t site, std::uint64_t chunk,
                                                            std::span<const std::byte> payload,
                                                            compression::Pipeline& pipeline);
  /// As add_payload, for values already decoded.
  Result<std::optional<std::span<const float>>> add_decoded(std::uint32_t site, std::uint64_t chunk,
                                                            std::span<const float> values);

  /// Whether every chunk has been reduced.
  bool complete() const { return reduced_count_ == layout_.count(); }
  std::uint64_t chunks_in_flight() const { return in_flight_.size(); }
  /// Σ Δ_i² over the reduced chunks, summed per chunk and then in chunk
  /// order, so every site gets the same bits for the clipping scale.
  double squared_norm() const;
  const compression::ChunkLayout& layout() const { return layout_; }
  const std::vector<Participant>& participants() const { return participants_; }

 private:
  struct Pending {
    std::vector<std::vector<float>> slots;  // by participant index; empty until arrived
    std::size_t arrived = 0;
  };
  ChunkAggregator(compression::ChunkLayout layout, std::vector<Participant> participants,
                  std::uint64_t max_chunks_in_flight);
  Result<std::size_t> slot_of(std::uint32_t site, std::uint64_t chunk) const;
  Result<Pending*> pending_for(std::uint64_t chunk);
  std::span<const float> reduce(std::uint64_t chunk, Pending& pending);

  compression::ChunkLayout layout_;
  std::vector<Participant> participants_;  // sorted by site: the summation order
  std::vector<double> shares_;             // w_s / Σ w, same order
  std::uint64_t max_in_flight_;
  std::map<std::uint64_t, Pending> in_flight_;
  std::vector<std::uint8_t> reduced_;      // per chunk: 1 once reduced
  std::vector<double> chunk_squares_;      // per chunk: Σ Δ_i²
  std::uint64_t reduced_count_ = 0;
  std::vector<float> out_;                 // the last reduced chunk
};

}  // namespace geoloco::outer
