// One round's exchange in memory, computing exactly what geolocod's
// two-phase all-reduce (transport/allreduce.h) computes over TLS: the same
// cut into shards and chunks, the same encode seeds, the same codecs with
// each participant's error feedback, the same fp32 weighted sum in plan
// order, and the owner's encoded average that every site decodes. Only the
// network is gone; its bytes are counted as the transport counts them
// (frame headers included), so the simulator's figures are the daemons'.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "compression/error_feedback.h"
#include "compression/pipeline_spec.h"

namespace geoloco::sim {

/// One participant's part, in plan order.
struct ExchangeInput {
  std::span<const float> replica;  ///< its replica over the round's values
  std::span<const float> base;     ///< the anchor its replica trained from, same range: Δ = base − replica
  compression::ErrorFeedback* feedback = nullptr;  ///< its residual over the whole model, or none
};

struct ExchangeSpec {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::uint64_t seed = 0;                  ///< the job's seed (stochastic rounding)
  std::uint64_t chunk_elements = 1 << 18;  ///< the sites' transport.chunk_elements
  std::uint64_t feedback_offset = 0;       ///< where the round's values start in the model (streaming: a fragment)
  compression::PipelineSpec pipeline;      ///< the job's codec chain ({} = raw fp32)
  std::vector<double> weights;             ///< per participant, the plan's
  std::size_t observers = 0;               ///< sites left out that receive the average too (bytes only)
};

struct ExchangeResult {
  std::vector<float> delta;               ///< the averaged Δ every site decodes
  std::vector<std::uint64_t> bytes_sent;  ///< per participant: frame bytes (headers and payloads)
  std::uint64_t payload_bytes = 0;        ///< Σ participants' encoded contributions (phase 1, all chunks)
  std::uint64_t raw_bytes = 0;            ///< the same contributions as fp32
};

/// Runs the exchange. Each participant's residual is updated as a kept
/// round updates it in geolocod. Errors: invalid_argument (inputs of other
/// lengths, no participants, weights that are not > 0), the codecs'.
Result<ExchangeResult> run_exchange(const ExchangeSpec& spec, std::span<const ExchangeInput> participants);

}  // namespace geoloco::sim
