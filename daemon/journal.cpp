#include "daemon/journal.h"

#include <optional>
#include <utility>

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

Result<Journal> Journal::open(const std::string& path) {
  auto log = LineLog::open(path, "journal", [](std::string_view line) { return parse_line(line).has_value(); });
  if (!log.ok()) return log.status();
  Journal j(std::move(*log));
  for (const auto& line : j.log_.lines()) j.records_.push_back(*parse_line(line));
  return j;
}

Status Journal::append(const nlohmann::json& record) {
  GEOLOCO_TRY(log_.append(hashed_line(record.dump())));
  records_.push_back(record);
  return {};
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
      s.round = r.value("round", std::uint64_t{0});
      s.digest = r.value("anchor_digest", std::string());
      s.commits[s.round] = {s.digest, planned_round == s.round ? planned_attempt : 0};
      s.tokens = r.value("tokens", std::uint64_t{0});
      s.final = r.value("final", false);
    }
  }
  s.next_attempt = planned_round == s.round + 1 ? planned_attempt + 1 : 0;
  return s;
}

}  // namespace geoloco::daemon
