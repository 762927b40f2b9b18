// The arithmetic of one round's exchange, which every site, and the
// simulator, must do identically for the averaged Δ to have the same bits:
// how the tensor is cut among the participants and into chunks, the seed of
// every encode, the site's contribution Δ = base − replica, and the
// weighted sum of the decoded contributions, in participant order.
//
// The two-phase all-reduce (transport/allreduce.h) over N participants:
//   1. reduce-scatter: the tensor is cut into one contiguous shard per
//      participant (shard_range), each shard into chunks (chunk_range);
//      site s encodes chunk c of shard j of its contribution with seed
//      encode_seed(…, s, j, c, 1) and sends it to participant j;
//   2. all-gather: participant j decodes the N contributions to its chunk,
//      sums them with normalized weights in participant order (reduce), in
//      fp32, encodes the sum once with encode_seed(…, j, j, c, 2) and sends
//      those bytes to everyone; every site, j included, decodes them.
// The averaged Δ is then consumed chunk by chunk, shard after shard: the
// clipping norm sums its squares in that order (outer_step.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace geoloco::diloco {

/// Values [begin, begin + size) of a tensor.
struct Range {
  std::uint64_t begin = 0;
  std::uint64_t size = 0;
};

/// Shard j's range of a tensor of n values cut among `parts` participants.
Range shard_range(std::uint64_t n, std::size_t parts, std::size_t j);
/// Chunk c of a shard: `chunk` values from c·chunk on (the last one shorter).
Range chunk_range(Range shard, std::uint64_t c, std::uint64_t chunk);
/// The chunks of a shard.
std::uint64_t chunks_in(Range shard, std::uint64_t chunk);

/// The seed of one encode (stochastic rounding): of participant `site`'s
/// chunk `c` of shard `shard`, in phase 1 (its contribution) or 2 (the
/// owner's sum), for round `round`, attempt `attempt` of a job seeded
/// `seed`. The same on every attempt to replay it.
std::uint64_t encode_seed(std::uint64_t seed, std::uint64_t round, std::uint64_t attempt, std::size_t site,
                          std::size_t shard, std::uint64_t c, int phase);

/// A site's contribution to chunk `range`: `input`'s values, or, with a
/// base, base − input made in `scratch` (Δ = anchor − replica, one fp32
/// subtraction per value, one chunk at a time).
std::span<const float> contribution(std::span<const float> input, std::span<const float> base, Range range,
                                    std::vector<float>& scratch);

/// What each of `parts` sites sends in an all-reduce of `bytes` with no
/// compression: 2(N−1)/N × bytes (two-phase or ring). The volume a round's
/// compression ratio and the benchmarks' bounds are measured against; 0 for
/// one site.
double allreduce_bytes_per_site(double bytes, std::size_t parts);

/// The weights' shares w_s / Σw, summed in double in participant order and
/// rounded once to fp32: what each decoded contribution is multiplied by.
std::vector<float> normalized_weights(std::span<const double> weights);

/// sum[i] ← sum[i] + share · values[i] in fp32 (no contraction): one
/// participant's term of the weighted sum; participants are added in plan
/// order, starting from zeros.
void add_weighted(std::span<float> sum, std::span<const float> values, float share);

}  // namespace geoloco::diloco
