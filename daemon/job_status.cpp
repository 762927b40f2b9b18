#include "daemon/job_status.h"

#include "daemon/round_log.h"

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace geoloco::daemon {

namespace fs = std::filesystem;

std::string_view job_state_name(JobState s) {
  switch (s) {
    case JobState::starting:
      return "starting";
    case JobState::running:
      return "running";
    case JobState::finished:
      return "finished";
    case JobState::failed:
      return "failed";
    case JobState::cancelled:
      return "cancelled";
    case JobState::stopped:
      return "stopped";
  }
  return "unknown";
}

Result<JobState> parse_job_state(std::string_view name) {
  for (auto s : {JobState::starting, JobState::running, JobState::finished, JobState::failed, JobState::cancelled,
                 JobState::stopped})
    if (job_state_name(s) == name) return s;
  return GEOLOCO_ERROR(Err::invalid_argument, "unknown job state '", name, "'");
}

std::optional<double> RoundRecord::compute_share() const {
  if (!trainer_compute_seconds || !trainer_loop_seconds || *trainer_loop_seconds <= 0) return std::nullopt;
  return *trainer_compute_seconds / *trainer_loop_seconds;
}

nlohmann::json record_json(const RoundRecord& r, const std::map<std::uint64_t, double>& eval) {
  nlohmann::json j = stored_record_json(r);
  j.erase("fragments");
  if (r.fragments <= 1) j.erase("fragment");  // shown for Streaming DiLoCo only: the fragment this round synced
  const auto share = r.compute_share();
  j["compute_share"] = share ? nlohmann::json(*share) : nlohmann::json(nullptr);
  // The eval loss of the anchor this round started from.
  if (auto it = eval.find(r.round); it != eval.end()) j["eval_loss"] = it->second;
  else j["eval_loss"] = nullptr;
  if (r.costs) j["costs"] = costs_json(*r.costs);
  return j;
}

nlohmann::json status_json(const JobStatusView& v) {
  static const std::vector<RoundRecord> no_records;
  const auto& records = v.records ? *v.records : no_records;
  const auto& eval = v.eval.loss;
  nlohmann::json rounds = nlohmann::json::array();
  std::uint64_t tokens = 0;
  double computed = 0, looped = 0;  // over the rounds whose trainer measured its time
  for (const auto& r : records) {
    rounds.push_back(record_json(r, eval));
    tokens += r.tokens;
    if (r.compute_share()) {
      computed += *r.trainer_compute_seconds;
      looped += *r.trainer_loop_seconds;
    }
  }
  using nlohmann::json;
  json j{{"name", v.name},
         {"state", job_state_name(v.state)},
         {"coordinator", v.coordinator},
         {"epoch", v.epoch},
         {"sites", v.sites},
         {"round", v.round},
         {"tokens", tokens},
         {"bytes_sent", v.bytes_sent},
         {"bytes_received", v.bytes_received},
         {"message", v.message},
         {"rounds", rounds},
         {"fragments", v.fragments},
         {"job_dir", v.job_dir},
         {"where", v.where}};
  j["stop_rounds"] = v.stop_rounds ? json(*v.stop_rounds) : json(nullptr);
  j["loss"] = records.empty() ? json(nullptr) : json(records.back().loss);
  // The share of the trainer's loop (evaluations aside) spent in inner steps, over the job so far.
  j["compute_share"] = looped > 0 ? json(computed / looped) : json(nullptr);
  j["eval_loss"] = eval.empty() ? json(nullptr) : json(eval.rbegin()->second);
  j["eval_round"] = eval.empty() ? json(nullptr) : json(eval.rbegin()->first);
  j["eval_accuracy"] = nullptr;  // of the latest evaluated anchor, for a classifier
  if (!eval.empty())
    if (auto it = v.eval.accuracy.find(eval.rbegin()->first); it != v.eval.accuracy.end())
      j["eval_accuracy"] = it->second;
  j["checkpoint"] = v.checkpoint ? json(*v.checkpoint) : json(nullptr);
  j["anchor_digest"] = v.anchor_digest ? json(*v.anchor_digest) : json(nullptr);
  if (v.liveness) {
    j["live_sites"] = v.liveness->first;
    j["lagging"] = v.liveness->second;
  } else {
    std::vector<std::string> live, lagging;
    if (!records.empty()) {
      live = records.back().participants;
      live.insert(live.end(), records.back().late.begin(), records.back().late.end());
      std::sort(live.begin(), live.end());
      lagging = records.back().late;
    }
    j["live_sites"] = live;
    j["lagging"] = lagging;
  }
  return j;
}

Status write_status_file(const std::string& job_dir, const StatusFile& s) {
  const fs::path path = fs::path(job_dir) / "status.json";
  const fs::path tmp = fs::path(job_dir) / "status.json.tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"state", job_state_name(s.state)}, {"file", s.file}, {"message", s.message}}.dump() << "\n";
    out.flush();
    if (!out) {
      const int err = errno;  // what the failed write left (a full disk: ENOSPC)
      out.close();
      fs::remove(tmp, ec);  // no half-written file is left behind
      return GEOLOCO_ERROR(Err::io, "cannot write ", tmp.string(), ": ", std::strerror(err));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return GEOLOCO_ERROR(Err::io, "cannot replace ", path.string(), ": ", why);
  }
  return {};
}

Result<StatusFile> read_status_file(const std::string& job_dir) {
  const fs::path path = fs::path(job_dir) / "status.json";
  std::ifstream in(path);
  GEOLOCO_RETURN_IF(!in, Err::io, "cannot read ", path.string());
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  GEOLOCO_RETURN_IF(j.is_discarded() || !j.is_object() || !j.contains("state") || !j["state"].is_string(),
                    Err::malformed, path.string(), " is not a job status ({\"state\": ...})");
  auto state = parse_job_state(j["state"].get<std::string>());
  if (!state.ok()) return Status(Err::malformed, cat(path.string(), ": ", state.status().message()));
  StatusFile s;
  s.state = *state;
  s.file = j.value("file", std::string());
  s.message = j.value("message", std::string());
  return s;
}

}  // namespace geoloco::daemon
