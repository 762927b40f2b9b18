#include "cli/job_output.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <optional>
#include <sstream>

namespace geoloco::cli {

namespace {
using nlohmann::json;

// Typed reads that never throw: a reply field that is missing, null or of
// another type is "absent".
const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::optional<double> number(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

// Counts (rounds, tokens, bytes) are unsigned; a negative or fractional
// value is a daemon bug and prints as absent.
std::optional<std::uint64_t> count(const json& obj, const char* key) {
  const json* v = field(obj, key);
  if (v == nullptr || !v->is_number_unsigned()) return std::nullopt;
  return v->get<std::uint64_t>();
}

std::string text(const json& obj, const char* key, const std::string& absent = "-") {
  const json* v = field(obj, key);
  if (v == nullptr || !v->is_string()) return absent;
  return v->get<std::string>();
}

std::vector<std::string> names(const json& obj, const char* key) {
  std::vector<std::string> out;
  const json* v = field(obj, key);
  if (v == nullptr || !v->is_array()) return out;
  for (const json& e : *v)
    if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

std::string join(const std::vector<std::string>& parts, const char* sep = ", ") {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

template <class... Args>
std::string format(const char* fmt, Args... args) {
  char buffer[512];
  const int n = std::snprintf(buffer, sizeof buffer, fmt, args...);
  if (n < 0) return "";
  if (static_cast<std::size_t>(n) < sizeof buffer) return std::string(buffer, static_cast<std::size_t>(n));
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), fmt, args...);
  big.resize(static_cast<std::size_t>(n));
  return big;
}

std::string fixed(std::optional<double> v, int decimals, const char* suffix = "") {
  if (!v) return "-";
  return format("%.*f%s", decimals, *v, suffix);
}

// A share in [0, 1] as "97.3%"; "-" when unknown.
std::string percent_text(std::optional<double> share) {
  if (!share || *share < 0) return "-";
  return format("%.1f%%", 100.0 * *share);
}

std::string count_text(std::optional<std::uint64_t> v) { return v ? std::to_string(*v) : std::string("-"); }

std::string bytes_text(const json& obj, const char* key) {
  auto v = number(obj, key);
  if (!v || *v < 0) return "-";
  return human_bytes(*v);
}

// "%5s  %5s ..." for the header and every round line alike, so both align.
constexpr const char* kWatchColumns = "%5s  %5s  %8s  %8s  %10s  %7s  %8s  %8s  %8s  %6s  %s";

// Status rows: "  key         value", continuation lines of a multi-line
// value (an error) indented under the value.
void row(std::vector<std::string>& out, const char* key, const std::string& value) {
  std::istringstream lines(value);
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    out.push_back(first ? format("  %-12s%s", key, line.c_str()) : std::string(14, ' ') + line);
    first = false;
  }
  if (first) out.push_back(format("  %-12s%s", key, "-"));
}
}  // namespace

std::string default_socket_path(const char* env_value) {
  if (env_value != nullptr && env_value[0] != '\0') return env_value;
  return "/run/geoloco/geolocod.sock";
}

std::string human_bytes(double bytes) {
  if (bytes < 1024) return format("%.0f B", bytes);
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = bytes / 1024;
  std::size_t unit = 0;
  // 1023.95 prints as "1024.0": move up a unit before that happens.
  while (v >= 1023.95 && unit + 1 < std::size(units)) {
    v /= 1024;
    ++unit;
  }
  return format("%.1f %s", v, units[unit]);
}

std::string watch_header() {
  return format(kWatchColumns, "round", "sites", "loss", "eval", "sent", "ratio", "compute", "waiting", "exchange",
                "busy", "lagging");
}

std::string watch_round_line(const json& listed) {
  // A round this site did not apply, its state given by a peer: no bytes or
  // timings of this site's, and the last column says where it came from.
  const std::string from = text(listed, "installed_from", "");
  json round = listed;
  if (!from.empty())
    for (const char* own :
         {"bytes_sent", "compression_ratio", "compute_seconds", "waiting_seconds", "exchange_seconds", "compute_share"})
      round.erase(own);
  const auto participants = names(round, "participants");
  const auto late = names(round, "late");
  const std::string sites = format("%zu/%zu", participants.size(), participants.size() + late.size());
  // Streaming DiLoCo: "12:f2" is round 12, which synced fragment 2.
  std::string number_text = count_text(count(round, "round"));
  if (auto fragment = count(round, "fragment")) number_text.append(":f").append(std::to_string(*fragment));
  std::string last = late.empty() ? "-" : join(late);
  if (!from.empty()) last.append(" (state from ").append(from).append(")");
  return format(kWatchColumns, number_text.c_str(), sites.c_str(), fixed(number(round, "loss"), 4).c_str(),
                fixed(number(round, "eval_loss"), 4).c_str(), bytes_text(round, "bytes_sent").c_str(),
                fixed(number(round, "compression_ratio"), 1, "x").c_str(),
                fixed(number(round, "compute_seconds"), 1).c_str(), fixed(number(round, "waiting_seconds"), 1).c_str(),
                fixed(number(round, "exchange_seconds"), 1).c_str(),
                percent_text(number(round, "compute_share")).c_str(), last.c_str());
}

std::string watch_event_line(const json& event) { return "# " + text(event, "event", ""); }

std::vector<std::string> job_block(const json& job) {
  std::vector<std::string> out;
  // Appended piece by piece: GCC 12 misreads a long `a + b + c` chain of
  // strings as an overlapping memcpy (-Wrestrict) at -O2.
  std::string title = text(job, "name");
  title.append(": ").append(text(job, "state")).append(", round ").append(count_text(count(job, "round")));
  if (auto stop = count(job, "stop_rounds")) title.append("/").append(std::to_string(*stop));
  // The office holder, and its epoch once a successor took office.
  const auto epoch = count(job, "epoch");
  if (job.contains("coordinator") && text(job, "coordinator").empty())
    title.append(" (coordinator: being elected, epoch ").append(std::to_string(epoch.value_or(0)));
  else title.append(" (coordinator ").append(text(job, "coordinator"));
  if (epoch && *epoch > 0 && !text(job, "coordinator").empty()) title.append(", epoch ").append(std::to_string(*epoch));
  // Streaming DiLoCo: a round syncs one of F fragments.
  if (auto fragments = count(job, "fragments"); fragments && *fragments > 1)
    title.append(", streaming: ").append(std::to_string(*fragments)).append(" fragments, one per round");
  title.append(")");
  out.push_back(title);

  const auto sites = names(job, "sites");
  const auto live = names(job, "live_sites");
  std::string live_text = format("%zu/%zu", live.size(), sites.size());
  if (!live.empty()) live_text += ": " + join(live);
  row(out, "live sites", live_text);
  const auto lagging = names(job, "lagging");
  row(out, "lagging", lagging.empty() ? "-" : join(lagging));
  row(out, "loss", fixed(number(job, "loss"), 4));
  std::string eval = fixed(number(job, "eval_loss"), 4);
  if (auto accuracy = number(job, "eval_accuracy")) eval += format(" (accuracy %.4f)", *accuracy);
  row(out, "eval loss", eval);
  row(out, "tokens", count_text(count(job, "tokens")));
  // The trainer's share of its loop (evaluations aside) in inner steps, over the job.
  const auto share = number(job, "compute_share");
  row(out, "busy", share ? percent_text(share) + " of the trainer's time in inner steps" : "-");
  row(out, "sent", bytes_text(job, "bytes_sent") + " (received " + bytes_text(job, "bytes_received") + ")");
  row(out, "checkpoint", text(job, "checkpoint", "none yet"));
  row(out, "message", text(job, "message"));
  return out;
}

std::vector<std::string> status_lines(const json& reply, const std::string& job) {
  std::vector<std::string> out;
  const json* jobs = field(reply, "jobs");
  std::vector<const json*> shown;
  if (jobs != nullptr && jobs->is_array())
    for (const json& j : *jobs)
      if (job.empty() || text(j, "name", "") == job) shown.push_back(&j);
  if (job.empty()) {
    const std::string site = text(reply, "site");
    if (shown.empty()) {
      out.push_back("site " + site + ": no jobs (`geoloco submit job.yaml` starts one)");
      return out;
    }
    out.push_back(format("site %s: %zu job%s", site.c_str(), shown.size(), shown.size() == 1 ? "" : "s"));
  }
  for (const json* j : shown) {
    if (!out.empty()) out.emplace_back();
    for (auto& line : job_block(*j)) out.push_back(std::move(line));
  }
  return out;
}

bool status_has_job(const json& reply, const std::string& job) {
  const json* jobs = field(reply, "jobs");
  if (jobs == nullptr || !jobs->is_array()) return false;
  for (const json& j : *jobs)
    if (text(j, "name", "") == job) return true;
  return false;
}

std::string missing_job_line(const json& status_reply, const std::string& job) {
  std::vector<std::string> known;
  if (const json* jobs = field(status_reply, "jobs"); jobs != nullptr && jobs->is_array())
    for (const json& j : *jobs) known.push_back(text(j, "name"));
  return "no job '" + job + "' on site " + text(status_reply, "site") + " (" +
         (known.empty() ? std::string("no jobs there") : "jobs there: " + join(known)) +
         "); `geoloco status` lists the jobs";
}

std::vector<std::string> submit_lines(const json& reply) {
  const std::string job = text(reply, "job");
  std::vector<std::string> out;
  out.push_back("submitted job " + job + ": coordinator " + text(reply, "coordinator") + ", sites " +
                join(names(reply, "sites")));
  if (const std::string message = text(reply, "message", ""); !message.empty()) out.push_back(message);
  out.push_back("follow it with: geoloco watch " + job);
  return out;
}

bool socket_admits(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, uid_t owner, gid_t group) {
  if (uid == 0 || uid == owner || gid == group) return true;
  for (gid_t g : groups)
    if (g == group) return true;
  return false;
}

std::string join_group_hint() {
  return "  add your user to the geoloco group (sudo adduser $USER geoloco) and log in again";
}

std::vector<std::string> hung_up_lines(const std::string& command, const std::string& path, const std::string& detail) {
  return {"geoloco " + command + ": geolocod at " + path + " closed the connection without an answer: " + detail,
          join_group_hint()};
}

std::vector<std::string> unreachable_lines(const std::string& command, const std::string& path, int connect_errno,
                                           const std::string& detail) {
  std::vector<std::string> out;
  if (connect_errno == 0) {
    out.push_back("geoloco " + command + ": lost geolocod at " + path + ": " + detail);
  } else {
    out.push_back("geoloco " + command + ": cannot reach geolocod at " + path + ": " + std::strerror(connect_errno));
  }
  if (connect_errno == EACCES || connect_errno == EPERM) {
    out.push_back(join_group_hint());
  } else {
    out.push_back("  is geolocod running? `systemctl status geolocod`");
    out.push_back("  another site's daemon: --socket PATH (or GEOLOCO_CONTROL_SOCKET=PATH)");
  }
  return out;
}

}  // namespace geoloco::cli
