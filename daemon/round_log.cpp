#include "daemon/round_log.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace geoloco::daemon {

namespace {

using nlohmann::json;

json optional_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// The field's value when it is present with the type T, else nothing. A
// double may be null: JSON has no NaN or infinity, which it stands for (a
// trainer's loss that was not finite), and it reads back as NaN.
template <typename T>
std::optional<T> field(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) return std::nullopt;
  if constexpr (std::is_same_v<T, double>) {
    if (it->is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (!it->is_number()) return std::nullopt;
  } else if constexpr (std::is_same_v<T, std::uint32_t>) {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max())
      return std::nullopt;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return std::nullopt;
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return std::nullopt;
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (!it->is_array() || !std::all_of(it->begin(), it->end(), [](const json& e) { return e.is_string(); }))
      return std::nullopt;
  } else {
    if (!it->is_number_unsigned()) return std::nullopt;
  }
  return it->get<T>();
}

// The record of an intact line, when it is one of the configuration `config`
// that this version reads.
std::optional<RoundRecord> parse_line(std::string_view line, const std::string& config) {
  const auto text = hashed_line_text(line);
  if (!text) return std::nullopt;
  const auto j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || field<std::string>(j, "config") != config) return std::nullopt;
  return stored_record(j);
}

}  // namespace

json stored_record_json(const RoundRecord& r) {
  json j{{"round", r.round},
         {"fragment", r.fragment},
         {"fragments", r.fragments},
         {"participants", r.participants},
         {"late", r.late},
         {"loss", r.loss},
         {"tokens", r.tokens},
         {"bytes_sent", r.bytes_sent},
         {"bytes_received", r.bytes_received},
         {"compression_ratio", r.compression_ratio},
         {"compute_seconds", r.compute_seconds},
         {"waiting_seconds", r.waiting_seconds},
         {"exchange_seconds", r.exchange_seconds},
         {"trainer_compute_seconds", optional_json(r.trainer_compute_seconds)},
         {"trainer_loop_seconds", optional_json(r.trainer_loop_seconds)},
         {"digest", r.digest},
         {"contributed", r.contributed}};
  if (!r.installed_from.empty()) j["installed_from"] = r.installed_from;
  return j;
}

std::optional<RoundRecord> stored_record(const json& j) {
  // Each field into `to` when present with its type; false (and the record refused) otherwise.
  const auto read = [&j](const char* name, auto& to) {
    auto v = field<std::remove_reference_t<decltype(to)>>(j, name);
    if (v) to = std::move(*v);
    return v.has_value();
  };
  RoundRecord r;
  if (!(read("round", r.round) && read("fragment", r.fragment) && read("fragments", r.fragments) &&
        read("participants", r.participants) && read("late", r.late) && read("loss", r.loss) &&
        read("tokens", r.tokens) && read("bytes_sent", r.bytes_sent) && read("bytes_received", r.bytes_received) &&
        read("compression_ratio", r.compression_ratio) && read("compute_seconds", r.compute_seconds) &&
        read("waiting_seconds", r.waiting_seconds) && read("exchange_seconds", r.exchange_seconds) &&
        read("digest", r.digest) && read("contributed", r.contributed)))
    return std::nullopt;
  // null: not measured
  if (const auto it = j.find("trainer_compute_seconds"); it != j.end() && it->is_number())
    r.trainer_compute_seconds = it->get<double>();
  if (const auto it = j.find("trainer_loop_seconds"); it != j.end() && it->is_number())
    r.trainer_loop_seconds = it->get<double>();
  if (const auto it = j.find("installed_from"); it != j.end() && it->is_string())
    r.installed_from = it->get<std::string>();
  return r;
}

Result<RoundLog> RoundLog::open(const std::string& path, std::string config) {
  // Damage is a line whose hash does not match; a whole line of another
  // configuration or version is skipped, and the lines after it kept.
  auto log = LineLog::open(path, "round log", [](std::string_view line) { return hashed_line_text(line).has_value(); });
  if (!log.ok()) return log.status();
  RoundLog rounds(std::move(*log), std::move(config));
  for (const auto& line : rounds.log_.lines()) {
    if (auto r = parse_line(line, rounds.config_)) rounds.keep(std::move(*r));
    else ++rounds.skipped_;
  }
  return rounds;
}

std::uint64_t RoundLog::bytes_sent() const {
  std::uint64_t n = 0;
  for (const auto& r : records_) n += r.bytes_sent;
  return n;
}

std::uint64_t RoundLog::bytes_received() const {
  std::uint64_t n = 0;
  for (const auto& r : records_) n += r.bytes_received;
  return n;
}

void RoundLog::keep(RoundRecord record) {
  std::erase_if(records_, [&](const RoundRecord& r) { return r.round >= record.round; });
  records_.push_back(std::move(record));
}

Status RoundLog::append(const RoundRecord& record) { return append(std::span<const RoundRecord>(&record, 1)); }

Status RoundLog::append(std::span<const RoundRecord> records) {
  for (const auto& record : records) {
    keep(record);
    json line = stored_record_json(record);
    line["config"] = config_;
    unwritten_.push_back(hashed_line(line.dump()));
  }
  Status status = log_.append(std::span<const std::string>(unwritten_));
  if (status.ok()) unwritten_.clear();
  return status;
}

bool RoundLog::set_costs(std::uint64_t round, const RoundCosts& costs) {
  for (auto it = records_.rbegin(); it != records_.rend(); ++it)
    if (it->round == round) {
      it->costs = costs;
      return true;
    }
  return false;
}

}  // namespace geoloco::daemon
