// What a site's history records (docs/history.md): one JSON object per line
// of <job dir>/history.jsonl, each with the wall-clock time it was written
// (`t`, milliseconds since the Unix epoch) and its `event`:
//
//   started             the job began on this site (again, after a restart):
//                       the round it holds and from where, and the rounds
//                       it rebuilt from its round log (each with its digest)
//   trainer_tokens      the trainer finished an inner phase: the round whose
//                       anchor it trained from, the fragment, its tokens
//   committed           a round this site applied: attempt, fragment,
//                       coordinator and its epoch, participants, late sites, each
//                       contribution (site, anchor round, tokens, weight),
//                       the anchor digest after it, whether it was the last
//   state_sync_applied  a committed state taken from a peer
//   dropped             this site's work left out for good, and why
//   aborted             an attempt of a round abandoned
//   ended               the job ended on this site: how, at which round
//
// This, not the log's wording, is what tests and `geoloco check-history`
// read. Parsing refuses anything else, naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"

namespace geoloco::history {

/// A committed round and the anchor digest after it.
struct RoundDigest {
  std::uint64_t round = 0;
  std::string digest;
  bool operator==(const RoundDigest&) const = default;
};

struct Started {
  std::string site;
  std::uint64_t round = 0;  ///< rounds committed in the state it holds (0: none yet)
  std::string digest;       ///< that state's anchor digest ("" without one)
  std::string from;         ///< "checkpoint", or "nothing" (the state comes from the trainer or a peer)
  /// The rounds rebuilt from the site's round log on its checkpoint, in
  /// order, each stepped to the digest its journal says committed (the last
  /// is `round`): the checkpoint holds the round before the first.
  std::vector<RoundDigest> rebuilt = {};
};

struct TrainerTokens {
  std::uint64_t round = 0;  ///< the round it trained for: its anchor is that of round − 1's commit
  std::uint32_t fragment = 0;
  std::uint64_t tokens = 0;  ///< what the phase counts for (at least 1, as READY reports it)
};

struct Contribution {
  std::string site;
  std::uint64_t anchor_round = 0;  ///< the phase's round (< the round committed when it was late)
  std::uint64_t tokens = 0;
  double weight = 0;
  bool operator==(const Contribution&) const = default;
};

struct Committed {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::uint32_t fragment = 0;
  std::string coordinator;
  std::uint64_t epoch = 0;                ///< the coordinator's office (0: the job's named coordinator)
  std::vector<std::string> participants;  ///< the all-reduce's order
  std::vector<std::string> late;
  std::vector<Contribution> contributions;  ///< one per participant, same order
  std::string digest;                       ///< the anchor after the round
  bool final = false;                       ///< the job's last round
};

struct StateSyncApplied {
  std::uint64_t round = 0;
  std::string digest;
  std::string from;
};

struct Dropped {
  std::uint64_t round = 0;  ///< the dropped phase's round (as in trainer_tokens)
  std::string site;
  std::uint64_t tokens = 0;
  std::string reason;
};

struct Aborted {
  std::uint64_t round = 0;
  std::uint64_t attempt = 0;
  std::string reason;
};

struct Ended {
  std::string state;  ///< finished, stopped, cancelled or failed
  std::uint64_t round = 0;
  std::string digest;
  std::string reason;
};

using Event = std::variant<Started, TrainerTokens, Committed, StateSyncApplied, Dropped, Aborted, Ended>;

struct Record {
  std::int64_t t_ms = 0;  ///< when it was written, ms since the Unix epoch
  Event event;
};

std::string_view event_name(const Event& event);
/// One line of JSON, without a newline.
std::string encode_record(const Record& record);
/// Errors: malformed, naming the field.
Result<Record> parse_record(std::string_view line);

}  // namespace geoloco::history
