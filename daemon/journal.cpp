#include "daemon/journal.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "daemon/journal_records.h"

namespace geoloco::daemon {

namespace {

// The record in one line (without its newline), or nothing when the line is damaged.
std::optional<nlohmann::json> parse_line(std::string_view line) {
  const auto text = hashed_line_text(line);
  if (!text) return std::nullopt;
  auto record = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) return std::nullopt;
  return record;
}

}  // namespace

Status check_journal_record(const nlohmann::json& record) {
  GEOLOCO_RETURN_IF(!record.is_object(), Err::malformed, "a record is ", record.type_name(), ", not a JSON object");
  const auto type = record.find("type");
  if (type == record.end()) return {};  // read as no type: skipped
  GEOLOCO_RETURN_IF(!type->is_string(), Err::malformed, "a record's 'type' is ", type->type_name(), ", not a string");
  // A type this version does not read is skipped; one it reads, read by its codec.
  Status check;
  if (!known_record_type(type->get<std::string>(), record, check)) return {};
  return check;
}

Result<Journal> Journal::open(const std::string& path) {
  auto log = LineLog::open(path, "journal", [](std::string_view line) { return parse_line(line).has_value(); });
  if (!log.ok()) return log.status();
  Journal j(std::move(*log));
  std::size_t line = 0;
  for (const auto& text : j.log_.lines()) {
    ++line;
    auto record = *parse_line(text);
    // Whole and hashed, yet not what geolocod writes: another program's or
    // version's. Refused rather than skipped: a committed round in it must
    // not be forgotten.
    if (Status fit = check_journal_record(record); !fit.ok())
      return Status(Err::malformed, cat("the journal ", path, ", record ", line, ": ", fit.message(),
                                        ": it was not written by this geolocod (another version, or edited by "
                                        "hand); move the job's folder aside and the site takes the committed state "
                                        "from a peer"));
    j.records_.push_back(std::move(record));
    j.note_committed(j.records_.back());
  }
  return j;
}

Status Journal::append(const nlohmann::json& record) {
  if (Status fit = check_journal_record(record); !fit.ok())
    return Status(Err::internal, cat("a journal record this site would not read back: ", fit.message()));
  GEOLOCO_TRY(log_.append(hashed_line(record.dump())));
  records_.push_back(record);
  note_committed(record);
  return {};
}

void Journal::note_committed(const nlohmann::json& record) {
  if (!record.is_object() || record.value("type", "") != "committed") return;
  const auto committed = committed_record_of(record);
  if (!committed.ok()) return;  // check_journal_record() let none such in
  const std::uint64_t round = committed->round;
  committed_at_.emplace(round, records_.size() - 1);  // note_committed follows the push_back
  if (round < committed_round_) return;
  committed_round_ = round;
  last_committed_ = record;
}

JournalSummary summarize_journal(const std::vector<nlohmann::json>& records) {
  JournalSummary s;
  std::uint64_t planned_round = 0, planned_attempt = 0;
  for (const auto& r : records) {
    const std::string type = r.value("type", "");
    if (type == "plan") {
      const auto plan = plan_record_of(r);
      if (!plan.ok()) continue;  // check_journal_record() let none such in
      planned_round = plan->round;
      planned_attempt = plan->attempt;
    } else if (type == "committed") {
      const auto committed = committed_record_of(r);
      if (!committed.ok()) continue;  // check_journal_record() let none such in
      const std::uint64_t round = committed->round;
      JournaledCommit c{committed->anchor_digest, committed->attempt, committed->tokens, committed->epoch.value_or(0)};
      if (!c.attempt && committed->via.empty()) c.attempt = planned_round == round ? planned_attempt : 0;
      if (round < s.round) {
        // A round older than one it holds, journaled later (a state's
        // entries kept in the round log): listed, the last round unchanged.
        s.commits.emplace(round, c);
        continue;
      }
      s.round = round;
      s.digest = c.digest;
      s.commits[s.round] = c;
      s.tokens = c.tokens;
      s.final = committed->final.value_or(false);
    } else if (type == "pending") {
      const auto pending = pending_record_of(r);
      if (!pending.ok()) continue;  // check_journal_record() let none such in
      if (pending->cleared) s.pending.reset();
      else s.pending = pending->commit;
    }
  }
  if (s.pending && s.pending->round <= s.round) s.pending.reset();
  s.next_attempt = planned_round == s.round + 1 ? planned_attempt + 1 : 0;
  return s;
}

std::optional<RoundOutcomeMessage> round_outcome(const Journal& journal, std::uint64_t round) {
  const nlohmann::json* record = journal.committed_record(round);
  if (!record) return std::nullopt;
  const auto committed = committed_record_of(*record);
  if (!committed.ok() || !committed->attempt) return std::nullopt;
  RoundOutcomeMessage out{round, *committed->attempt, committed->anchor_digest};
  if (out.anchor_digest.size() != 16 || out.attempt > kMaxAttempt) return std::nullopt;
  return out;
}

// The plan this site answered with its COMMIT of `round` (attempt
// `attempt`), as its journal's `pending` record keeps it; none when the
// record lacks it or is not well formed.
std::optional<PlanMessage> journaled_plan(const std::vector<nlohmann::json>& records, std::uint64_t round,
                                          std::optional<std::uint64_t> attempt, std::string& coordinator) {
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (!it->is_object() || it->value("type", "") != "pending") continue;
    const auto pending = pending_record_of(*it);
    if (!pending.ok() || pending->cleared || pending->commit.round != round) continue;
    if (attempt && pending->commit.attempt != *attempt) continue;
    if (!pending->plan) return std::nullopt;
    const PendingPlan& p = *pending->plan;
    const std::size_t n = p.participants.size();
    if (p.weights.size() != n || p.tokens_each.size() != n || p.anchor_rounds.size() != n) return std::nullopt;
    PlanMessage plan;
    plan.round = round;
    plan.attempt = pending->commit.attempt;
    plan.participants = p.participants;
    plan.late = p.late;
    plan.weights = p.weights;
    plan.tokens_each = p.tokens_each;
    plan.anchor_rounds = p.anchor_rounds;
    plan.loss = p.loss;
    plan.epoch = p.epoch;
    for (auto t : plan.tokens_each) plan.tokens += t;
    coordinator = p.coordinator;
    return plan;
  }
  return std::nullopt;
}

}  // namespace geoloco::daemon
