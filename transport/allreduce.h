// The cross-site all-reduce (docs/design.md §3): a weighted average of one tensor per
// site, in two phases over the full mesh of the operation's participants.
//
//   1. reduce-scatter: the tensor is cut into one contiguous shard per
//      participant; site s compresses shard j of its input (through its
//      error feedback) and sends it, chunk by chunk, to participant j.
//   2. all-gather: participant j decodes the N contributions to each chunk of
//      its shard, sums them weighted, in participant order (whatever the
//      arrival order: the result is reproducible bit for bit), compresses the
//      average and sends the same bytes to everyone. Every site, j included,
//      decodes those bytes, so all hold the same output, bit for bit.
//
// Two WAN latencies instead of a ring's 2(N-1); each site sends and receives
// 2(N-1)/N of the (compressed) tensor. Chunks of shard j travel on connection
// (chunk mod connections_per_peer), so one long fat link is filled by several
// TLS streams. Memory: encoded chunks in flight plus one chunk of scratch
// per decode; never a second full copy of the tensor per peer.
#pragma once

#include <asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "compression/error_feedback.h"
#include "compression/pipeline_spec.h"
#include "diloco/chunk_pass.h"
#include "diloco/exchange.h"
#include "transport/mesh.h"

namespace geoloco::transport {

// The cut, the seeds and the weighted sum are diloco/exchange.h's, which the
// simulator computes with too.
using diloco::Range;
using diloco::shard_range;

/// An all-reduce's result kept as the bytes every site decodes (each
/// owner's encoded chunks of its averaged shard) instead of as values: with
/// q8 + zstd about a fifth of the memory (docs/design.md §10: geolocod holds the
/// averaged Δ this way until the round commits). for_each() decodes the
/// chunks again, one at a time, to the same values bit for bit.
struct EncodedOutput {
  std::uint64_t values = 0;            ///< the tensor's length; set by the caller
  compression::PipelineSpec pipeline;  ///< the chunks' codec chain (set by all_reduce)
  std::vector<Range> ranges;           ///< chunk i's values, in order, covering [0, values)
  std::vector<Buffer> chunks;          ///< chunk i's encoded bytes
  std::vector<std::string> sources;    ///< the site that averaged chunk i (its shard's owner)
  /// Values for_each() has decoded since the last clear(): what the passes
  /// over the averaged Δ cost (geolocod's decodes per chunk).
  mutable std::uint64_t values_decoded = 0;

  /// Encoded bytes held.
  std::uint64_t bytes() const;
  /// The chunks as a pass over them reads them (diloco/chunk_pass.h): each
  /// thread decodes with a codec of its own, and a chunk that does not
  /// decode is named with the site that averaged it. The list refers to
  /// this output, which must outlive it.
  diloco::ChunkList chunk_list() const;
  /// Decodes chunk after chunk, in order, into one chunk of scratch and calls
  /// fn(offset of the chunk's first value, its values). Stops at the first
  /// error. Errors: fn's, the codec's (as chunk_list()'s).
  Status for_each(const std::function<Status(std::uint64_t, std::span<const float>)>& fn) const;
  void clear();
};

struct AllReduceRequest {
  OpKey key;                              ///< (round, attempt); the same on every participant
  std::vector<std::string> participants;  ///< the plan's order, the same on every participant
  std::vector<double> weights;            ///< per participant (tokens x staleness), > 0
  /// Sites that contribute nothing but receive the average too (stragglers
  /// keep their anchor current this way). This site is a participant or an
  /// observer. Sending to an observer is best effort: a lost observer does
  /// not fail the participants' operation.
  std::vector<std::string> observers;
  compression::PipelineSpec pipeline;  ///< the job's codec chain ({} = raw fp32)
  std::span<const float> input;        ///< this site's contribution (empty for an observer)
  /// When set (as long as `input`): the contribution is input_base − input,
  /// computed one chunk at a time as it is encoded, so the caller never
  /// holds it whole (geolocod: Δ = anchor − replica, docs/design.md §3's memory bound).
  std::span<const float> input_base;
  std::span<float> output;  ///< receives the weighted average
  /// Instead of `output` (which must then be empty): keep the average as
  /// its encoded chunks. Only each chunk's header is checked on arrival
  /// (its chain and length): the caller's first pass over the chunks decodes
  /// them, and refuses one whose body does not decode.
  EncodedOutput* encoded_output = nullptr;
  compression::ErrorFeedback* feedback = nullptr;  ///< this site's residual for `input`'s tensor, or none
  /// Where `input` starts in the feedback's tensor (a Streaming DiLoCo
  /// fragment of the model); the residual covers at least offset + input.size().
  std::uint64_t feedback_offset = 0;
  std::uint64_t seed = 0;                ///< job seed, for stochastic rounding
  std::chrono::milliseconds timeout{0};  ///< whole-operation limit; 0: only the connections' timeouts
};

struct AllReduceStats {
  std::uint64_t bytes_sent = 0;      ///< frame bytes (headers and payloads) this site sent
  std::uint64_t bytes_received = 0;  ///< frame bytes this site received
  double seconds = 0;
  /// Where this site's CPU went, thread CPU around each call on the mesh's
  /// executor: its contributions made (Δ = base − input) and encoded
  /// through the residual; as an owner, the contributions decoded, averaged
  /// and the average encoded, and every gathered chunk decoded. `cpu_seconds`
  /// is the process's CPU over the operation, every thread (the TLS and
  /// socket work of the connections' threads included).
  double encode_cpu_seconds = 0, reduce_cpu_seconds = 0, cpu_seconds = 0;
  std::uint64_t values_encoded = 0;  ///< of this site's contributions
  std::uint64_t gathered_values_decoded =
      0;  ///< averaged values decoded on arrival (into the output; none for encoded output)
};

/// Runs the all-reduce on the mesh's executor. Errors: invalid_argument
/// (request), io/timeout naming the peer that failed ("peer b: no data from
/// b for 2000 ms"), or the error of a refused frame from a participant. On
/// error `output` holds no meaningful values and is no longer touched.
asio::awaitable<Result<AllReduceStats>> all_reduce(Mesh& mesh, AllReduceRequest request);

}  // namespace geoloco::transport
