#include "history/history_file.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace geoloco::history {

namespace {
std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Result<HistoryFile> HistoryFile::open(const std::string& path) {
  // Only a crash's torn line is cut: a complete line this version cannot
  // read is kept (the checker names it), so nothing written is ever lost.
  auto log = LineLog::open(path, "history", [](std::string_view line) { return nlohmann::json::accept(line); });
  if (!log.ok()) return log.status();
  HistoryFile h(std::move(*log));
  for (const auto& line : h.log_.lines())
    if (auto r = parse_record(line); r.ok()) h.records_.push_back(std::move(*r));
  return h;
}

Status HistoryFile::append(const Event& event) { return append(Record{now_ms(), event}); }

Status HistoryFile::append(const Record& record) {
  GEOLOCO_TRY(log_.append(encode_record(record)));
  records_.push_back(record);
  return {};
}

Result<ReadHistory> read_history(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GEOLOCO_RETURN_IF(!in, Err::io, "cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  const std::string content = s.str();
  ReadHistory out;
  std::size_t at = 0, line_no = 0;
  while (at < content.size()) {
    const std::size_t end = content.find('\n', at);
    ++line_no;
    if (end == std::string::npos) {
      out.torn_tail = true;
      break;
    }
    auto r = parse_record(std::string_view(content).substr(at, end - at));
    GEOLOCO_RETURN_IF(!r.ok(), Err::malformed, path, ":", line_no, ": ", r.status().message());
    out.records.push_back(std::move(*r));
    at = end + 1;
  }
  return out;
}

Result<std::vector<JournalCommit>> read_journal_commits(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GEOLOCO_RETURN_IF(!in, Err::io, "cannot read ", path);
  std::vector<JournalCommit> out;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: torn
    const auto text = hashed_line_text(line);
    if (!text) break;
    const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) break;
    const auto type = j.find("type");
    if (type == j.end() || !type->is_string() || type->get_ref<const std::string&>() != "committed") continue;
    const auto round = j.find("round");
    const auto digest = j.find("anchor_digest");
    const auto final = j.find("final");
    if (round == j.end() || !round->is_number_unsigned() || digest == j.end() || !digest->is_string()) break;
    const auto tokens = j.find("tokens");
    out.push_back({round->get<std::uint64_t>(), digest->get<std::string>(),
                   final != j.end() && final->is_boolean() && final->get<bool>(),
                   tokens != j.end() && tokens->is_number_unsigned() ? tokens->get<std::uint64_t>() : 0});
  }
  return out;
}

}  // namespace geoloco::history
