// A site's committed state rebuilt from its disk alone (docs/design.md §4,
// crash safety): the checkpoint's state stepped through the averaged Δ of
// every later round the site's journal says committed, taken from the round
// log (round_deltas.h), with the same decode, clip and outer step as the
// live round (diloco/chunked_step.h), so the anchor and the momentum come
// out bit for bit as the live rounds left them.
//
// The replay goes as far as it can: it stops before a round the log lacks
// (a state installed by STATE_SYNC, a round this site did not vote for) or
// whose entry is not the committed outcome (another attempt's, a digest
// other than the journal's), and says why; the state then holds the last
// round it reached, a committed one. A round stepped to a digest other than
// the committed one (a damaged entry its hashes missed, a bug) leaves the
// state as no round's: that is an error, and the caller drops the state.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"
#include "compression/pipeline.h"
#include "daemon/journal.h"
#include "daemon/round_deltas.h"
#include "diloco/outer_step.h"
#include "outer/outer_state.h"

namespace geoloco::daemon {

struct ReplayOutcome {
  std::uint64_t from = 0;   ///< the round the state held before
  std::uint64_t to = 0;     ///< the round it holds now
  std::string digest;       ///< its anchor digest
  std::string stopped;      ///< why it stopped short of the target (empty: it reached it)
  std::uint64_t bytes = 0;  ///< the entries' encoded bytes read
};

/// Steps `state` (of round entry.round - 1) through `entry` with the live
/// round's decode, clip and outer step, and returns the anchor's digest;
/// the caller compares it with the committed one and sets the round.
/// Errors: invalid_argument (the entry does not fit or decode: `state` is
/// unchanged), mismatch (the step failed: `state` is no round's).
Result<std::string> step_round_delta(outer::OuterState& state, RoundDelta& entry,
                                     const compression::PipelineSpec& pipeline,
                                     const diloco::OuterOptimizerOptions& outer, unsigned threads = 1);

/// How step_logged_round() ended.
struct LoggedStep {
  bool stepped = false;     ///< `state` holds the round now, with the committed anchor
  bool lost = false;        ///< the step went wrong midway: `state` is no round's
  std::string why;          ///< why the round was not stepped
  std::uint64_t bytes = 0;  ///< the entry's encoded bytes
};

/// Steps `state` (of round `round` - 1) through the log's entry of `round`,
/// committed with anchor `digest` (by `attempt`, when given): the entry is
/// refused unless it is that outcome, and the stepped anchor must be
/// `digest`. Sets the state's round once stepped; leaves `state` unchanged
/// when the entry is missing, unreadable or another outcome's. `threads`:
/// the step's (diloco/chunk_pass.h), here and below.
LoggedStep step_logged_round(outer::OuterState& state, const RoundDeltas& log, std::uint64_t round,
                             const std::string& digest, std::optional<std::uint64_t> attempt,
                             const compression::PipelineSpec& pipeline, const diloco::OuterOptimizerOptions& outer,
                             unsigned threads = 1);

/// Steps `state` from its round through `target` with the log's entries of
/// the rounds `commits` lists. Errors: mismatch (a stepped anchor is not the
/// committed one: `state` is then no round's), the codec's and the step's.
Result<ReplayOutcome> replay_rounds(outer::OuterState& state, const RoundDeltas& log,
                                    const std::map<std::uint64_t, JournaledCommit>& commits, std::uint64_t target,
                                    const compression::PipelineSpec& pipeline,
                                    const diloco::OuterOptimizerOptions& outer, unsigned threads = 1);

}  // namespace geoloco::daemon
