#include "daemon/round_replay.h"

#include "common/digest.h"
#include "diloco/chunked_step.h"

namespace geoloco::daemon {

Result<std::string> step_round_delta(outer::OuterState& state, RoundDelta& entry,
                                     const compression::PipelineSpec& pipeline,
                                     const diloco::OuterOptimizerOptions& outer, unsigned threads) {
  const std::uint64_t n = state.anchor.size();
  GEOLOCO_RETURN_IF(entry.offset > n || entry.delta.values > n - entry.offset, Err::invalid_argument, "the Δ of round ",
                    entry.round, " covers values [", entry.offset, ", ", entry.offset + entry.delta.values,
                    "), the anchor holds ", state.anchor.size());
  entry.delta.pipeline = pipeline;
  const diloco::ChunkList delta = entry.delta.chunk_list();
  auto scale = diloco::chunked_clip_scale(delta, outer.clip_norm, threads);
  GEOLOCO_RETURN_IF(!scale.ok(), Err::invalid_argument, "the Δ of round ", entry.round,
                    " does not decode: ", scale.status().message());
  auto covered = delta.covered();
  GEOLOCO_RETURN_IF(!covered.ok() || *covered != entry.delta.values, Err::invalid_argument, "the Δ of round ",
                    entry.round, "'s chunks do not cover its ", entry.delta.values, " values");
  // From here on the state is changed: an error leaves it as no round's.
  // The anchor's digest is taken in the same pass as the step.
  auto stepped = diloco::step_chunks_digest(state.anchor, state.momentum, entry.offset, entry.delta.values, delta,
                                            outer, *scale, threads);
  GEOLOCO_RETURN_IF(!stepped.ok(), Err::mismatch, "stepping round ", entry.round, ": ", stepped.status().message());
  return digest_hex(*stepped);
}

LoggedStep step_logged_round(outer::OuterState& state, const RoundDeltas& log, std::uint64_t round,
                             const std::string& digest, std::optional<std::uint64_t> attempt,
                             const compression::PipelineSpec& pipeline, const diloco::OuterOptimizerOptions& outer,
                             unsigned threads) {
  LoggedStep out;
  auto read = log.read(round);
  if (!read.ok()) {
    out.why = read.status().message();
    return out;
  }
  if (!*read) {
    out.why =
        cat("the round log has no Δ of round ", round, " (this site did not vote for it, or installed it from a peer)");
    return out;
  }
  RoundDelta& entry = **read;
  if (entry.digest != digest || (attempt && entry.attempt != *attempt)) {
    out.why = cat("the round log's Δ of round ", round, " (attempt ", entry.attempt, ") gives anchor ", entry.digest,
                  ", the committed one is ", digest, attempt ? cat(" (attempt ", *attempt, ")") : std::string());
    return out;
  }
  auto stepped = step_round_delta(state, entry, pipeline, outer, threads);
  if (!stepped.ok()) {
    out.lost = stepped.status().code() == Err::mismatch;  // else the entry did not fit or decode: unchanged
    out.why = stepped.status().message();
    return out;
  }
  if (*stepped != digest) {
    out.lost = true;
    out.why = cat("replaying round ", round, " from the round log gives anchor ", *stepped, ", the committed one is ",
                  digest);
    return out;
  }
  state.round = round;
  out.stepped = true;
  out.bytes = entry.delta.bytes();
  return out;
}

Result<ReplayOutcome> replay_rounds(outer::OuterState& state, const RoundDeltas& log,
                                    const std::map<std::uint64_t, JournaledCommit>& commits, std::uint64_t target,
                                    const compression::PipelineSpec& pipeline,
                                    const diloco::OuterOptimizerOptions& outer, unsigned threads) {
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
    const LoggedStep step =
        step_logged_round(state, log, round, commit->second.digest, std::nullopt, pipeline, outer, threads);
    GEOLOCO_RETURN_IF(step.lost, Err::mismatch, step.why);
    if (!step.stepped) {
      out.stopped = step.why;
      break;
    }
    out.to = round;
    out.digest = commit->second.digest;
    out.bytes += step.bytes;
  }
  return out;
}

}  // namespace geoloco::daemon
