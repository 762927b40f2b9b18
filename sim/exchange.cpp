#include "sim/exchange.h"

#include <cmath>

#include "compression/pipeline.h"
#include "diloco/exchange.h"
#include "transport/frame.h"

namespace geoloco::sim {

Result<ExchangeResult> run_exchange(const ExchangeSpec& spec, std::span<const ExchangeInput> in) {
  const std::size_t parts = in.size();
  GEOLOCO_RETURN_IF(parts == 0, Err::invalid_argument, "exchange: no participants");
  GEOLOCO_RETURN_IF(spec.weights.size() != parts, Err::invalid_argument, "exchange: ", spec.weights.size(),
                    " weights for ", parts, " participants");
  for (double w : spec.weights)
    GEOLOCO_RETURN_IF(!(w > 0) || !std::isfinite(w), Err::invalid_argument, "exchange: weights must be finite and > 0");
  const std::uint64_t n = in[0].replica.size();
  for (const auto& p : in)
    GEOLOCO_RETURN_IF(p.replica.size() != n || p.base.size() != n, Err::invalid_argument,
                      "exchange: every participant's replica and base must hold ", n, " values");
  GEOLOCO_RETURN_IF(spec.chunk_elements == 0, Err::invalid_argument, "exchange: chunk_elements must be >= 1");
  auto pipeline = compression::Pipeline::create(spec.pipeline);
  if (!pipeline.ok()) return pipeline.status();
  const std::vector<float> shares = diloco::normalized_weights(spec.weights);
  constexpr std::uint64_t header = transport::kFrameHeaderSize;

  ExchangeResult out;
  out.delta.assign(n, 0.0f);
  out.bytes_sent.assign(parts, 0);
  std::vector<float> scratch, decoded, sum;
  std::vector<std::byte> buffer;
  // Owner j's shard, chunk by chunk: every participant's contribution is
  // encoded (phase 1) and sent to j unless it is j; j decodes them in plan
  // order, sums, encodes the sum (phase 2) and sends it to everyone else.
  for (std::size_t j = 0; j < parts; ++j) {
    const diloco::Range shard = diloco::shard_range(n, parts, j);
    for (std::uint64_t c = 0; c < diloco::chunks_in(shard, spec.chunk_elements); ++c) {
      const diloco::Range range = diloco::chunk_range(shard, c, spec.chunk_elements);
      sum.assign(range.size, 0.0f);
      decoded.resize(range.size);
      for (std::size_t s = 0; s < parts; ++s) {
        const auto values = diloco::contribution(in[s].replica, in[s].base, range, scratch);
        buffer.resize(pipeline->max_encoded_size(range.size));
        const std::uint64_t seed = diloco::encode_seed(spec.seed, spec.round, spec.attempt, s, j, c, 1);
        auto size = in[s].feedback != nullptr
                        ? in[s].feedback->encode(*pipeline, spec.feedback_offset + range.begin, values, buffer, seed)
                        : pipeline->encode(values, buffer, seed);
        if (!size.ok()) return size.status();
        out.payload_bytes += *size;
        out.raw_bytes += range.size * sizeof(float);
        if (s != j) out.bytes_sent[s] += header + *size;
        GEOLOCO_TRY(pipeline->decode(std::span(buffer).first(*size), decoded));
        diloco::add_weighted(sum, decoded, shares[s]);
      }
      buffer.resize(pipeline->max_encoded_size(range.size));
      auto size = pipeline->encode(sum, buffer, diloco::encode_seed(spec.seed, spec.round, spec.attempt, j, j, c, 2));
      if (!size.ok()) return size.status();
      out.bytes_sent[j] += (header + *size) * (parts - 1 + spec.observers);
      GEOLOCO_TRY(pipeline->decode(std::span(buffer).first(*size),
                                   std::span<float>(out.delta).subspan(range.begin, range.size)));
    }
  }
  return out;
}

}  // namespace geoloco::sim
