#include "daemon/round_replay.h"

#include "common/digest.h"
#include "diloco/chunked_step.h"

namespace geoloco::daemon {

Result<std::string> step_round_delta(outer::OuterState& state, RoundDelta& entry,
                                     const compression::PipelineSpec& pipeline,
                                     const diloco::OuterOptimizerOptions& outer) {
  const std::uint64_t n = state.anchor.size();
  GEOLOCO_RETURN_IF(entry.offset > n || entry.delta.values > n - entry.offset, Err::invalid_argument, "the Δ of round ",
                    entry.round, " covers values [", entry.offset, ", ", entry.offset + entry.delta.values,
                    "), the anchor holds ", state.anchor.size());
  entry.delta.pipeline = pipeline;
  const diloco::ChunkedDelta delta = [&](const diloco::ChunkFn& fn) { return entry.delta.for_each(fn); };
  auto scale = diloco::chunked_clip_scale(delta, outer.clip_norm);
  GEOLOCO_RETURN_IF(!scale.ok(), Err::invalid_argument, "the Δ of round ", entry.round,
                    " does not decode: ", scale.status().message());
  // From here on the state is changed: an error leaves it as no round's.
  Status stepped = diloco::step_chunks(state.anchor, state.momentum, entry.offset, delta, outer, *scale);
  GEOLOCO_RETURN_IF(!stepped.ok(), Err::mismatch, "stepping round ", entry.round, ": ", stepped.message());
  return digest_hex(state.anchor_digest());
}

Result<ReplayOutcome> replay_rounds(outer::OuterState& state, const RoundDeltas& log,
                                    const std::map<std::uint64_t, JournaledCommit>& commits, std::uint64_t target,
                                    const compression::PipelineSpec& pipeline,
                                    const diloco::OuterOptimizerOptions& outer) {
  ReplayOutcome out;
  out.from = out.to = state.round;
  out.digest = digest_hex(state.anchor_digest());
  while (state.round < target) {
    const std::uint64_t round = state.round + 1;
    auto commit = commits.find(round);
    if (commit == commits.end()) {
      out.stopped = cat("round ", round, " is not in the journal as committed");
      break;
    }
    auto read = log.read(round);
    if (!read.ok()) {
      out.stopped = read.status().message();
      break;
    }
    if (!*read) {
      out.stopped = cat("the round log has no Δ of round ", round,
                        " (this site did not vote for it, or installed it from a peer)");
      break;
    }
    RoundDelta& entry = **read;
    if (entry.digest != commit->second.digest) {
      out.stopped = cat("the round log's Δ of round ", round, " (attempt ", entry.attempt, ") gives anchor ",
                        entry.digest, ", the committed one is ", commit->second.digest);
      break;
    }
    auto stepped = step_round_delta(state, entry, pipeline, outer);
    if (!stepped.ok() && stepped.status().code() != Err::mismatch) {
      out.stopped = stepped.status().message();
      break;
    }
    if (!stepped.ok()) return stepped.status();
    const std::string& digest = *stepped;
    GEOLOCO_RETURN_IF(digest != commit->second.digest, Err::mismatch, "replaying round ", round,
                      " from the round log gives anchor ", digest, ", the committed one is ", commit->second.digest);
    state.round = round;
    out.to = round;
    out.digest = digest;
    out.bytes += entry.delta.bytes();
  }
  return out;
}

}  // namespace geoloco::daemon
