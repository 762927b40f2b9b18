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

enum class Kind { u64, text, boolean, list, object };

bool has_kind(const nlohmann::json& v, Kind k) {
  switch (k) {
    case Kind::u64:
      return is_count(v);
    case Kind::text:
      return v.is_string();
    case Kind::boolean:
      return v.is_boolean();
    case Kind::list:
      return v.is_array();
    case Kind::object:
      return v.is_object();
  }
  return false;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::u64:
      return "an unsigned integer";
    case Kind::text:
      return "a string";
    case Kind::boolean:
      return "true or false";
    case Kind::list:
      return "an array";
    case Kind::object:
      return "an object";
  }
  return "?";
}

// The fields of each record type geolocod reads, with their JSON types.
// A field may be absent (it reads as 0, "", false or empty, as records of
// older versions lack some), but one that is present has its type.
const std::map<std::string, std::vector<std::pair<const char*, Kind>>>& record_fields() {
  static const std::map<std::string, std::vector<std::pair<const char*, Kind>>> fields{
      {"plan",
       {{"round", Kind::u64},
        {"attempt", Kind::u64},
        {"epoch", Kind::u64},
        {"participants", Kind::list},
        {"weights", Kind::list},
        {"late", Kind::list}}},
      {"committed",
       {{"round", Kind::u64},
        {"anchor_digest", Kind::text},
        {"tokens", Kind::u64},
        {"final", Kind::boolean},
        {"attempt", Kind::u64},
        {"epoch", Kind::u64},
        {"via", Kind::text}}},
      {"abort", {{"round", Kind::u64}, {"reason", Kind::text}, {"epoch", Kind::u64}}},
      {"pending",
       {{"none", Kind::boolean},
        {"round", Kind::u64},
        {"attempt", Kind::u64},
        {"anchor_digest", Kind::text},
        {"tokens", Kind::u64},
        {"plan", Kind::object}}},
      {"vote", {{"epoch", Kind::u64}, {"for", Kind::text}}},
      {"office", {{"epoch", Kind::u64}, {"coordinator", Kind::text}}},
      {"office_started", {{"epoch", Kind::u64}}},
  };
  return fields;
}

}  // namespace

Status check_journal_record(const nlohmann::json& record) {
  GEOLOCO_RETURN_IF(!record.is_object(), Err::malformed, "a record is ", record.type_name(), ", not a JSON object");
  const auto type = record.find("type");
  if (type == record.end()) return {};  // read as no type: skipped
  GEOLOCO_RETURN_IF(!type->is_string(), Err::malformed, "a record's 'type' is ", type->type_name(), ", not a string");
  const auto known = record_fields().find(type->get<std::string>());
  if (known == record_fields().end()) return {};  // a type this version does not read: skipped
  for (const auto& [key, kind] : known->second) {
    const auto field = record.find(key);
    GEOLOCO_RETURN_IF(field != record.end() && !has_kind(*field, kind), Err::malformed, "a '", known->first,
                      "' record's '", key, "' is ", field->type_name(), ", not ", kind_name(kind));
  }
  return {};
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
      planned_round = r.value("round", std::uint64_t{0});
      planned_attempt = r.value("attempt", std::uint64_t{0});
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
