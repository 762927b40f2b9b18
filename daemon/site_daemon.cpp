#include "daemon/site_daemon.h"

#include "daemon/site_metrics.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <spdlog/spdlog.h>

#include "common/yaml_reader.h"

namespace geoloco::daemon {

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

SiteDaemon::SiteDaemon(asio::io_context& io, asio::any_io_executor connection_executor, SiteConfig site,
                       DaemonOptions options)
    : io_(io),
      connection_executor_(std::move(connection_executor)),
      site_(std::move(site)),
      options_(std::move(options)) {}

SiteDaemon::~SiteDaemon() = default;

std::set<std::string> SiteDaemon::federation() const {
  std::set<std::string> sites{site_.name};
  for (const auto& p : site_.peers) sites.insert(p.name);
  return sites;
}

void SiteDaemon::declare_metrics() { declare_site_metrics(metrics_); }

std::string SiteDaemon::render_metrics() {
  for (const auto& p : site_.peers) {
    auto& last = peer_bytes_[p.name];
    const std::uint64_t sent = mesh_->bytes_sent(p.name), received = mesh_->bytes_received(p.name);
    if (sent >= last.first)
      (void)metrics_.add("geoloco_peer_sent_bytes_total", {{"peer", p.name}}, double(sent - last.first));
    if (received >= last.second)
      (void)metrics_.add("geoloco_peer_received_bytes_total", {{"peer", p.name}}, double(received - last.second));
    last = {sent, received};
  }
  const std::uint64_t rejected = mesh_->rejected_frames();
  (void)metrics_.add("geoloco_rejected_frames_total", {}, double(rejected - rejected_seen_));
  rejected_seen_ = rejected;
  show_peer_certificates();
  std::map<std::string, int> states;
  if (active_) ++states[std::string(job_state_name(active_->state()))];
  for (const auto& j : past_) ++states[std::string(job_state_name(j->state()))];
  for (auto s : {"starting", "running", "finished", "failed", "cancelled", "stopped"})
    (void)metrics_.set("geoloco_jobs", {{"state", s}}, states[s]);
  if (active_) {
    const auto eval = active_->eval_losses();
    if (!eval.empty()) (void)metrics_.set("geoloco_eval_loss", {{"job", active_->spec().name}}, eval.rbegin()->second);
  }
  return metrics_.render();
}

Status SiteDaemon::start() {
  declare_metrics();
  transport::MeshOptions m;
  m.site = site_.name;
  m.listen_host = site_.listen.host;
  m.listen_port = site_.listen.port;
  m.peers = site_.peers;
  m.tls = site_.tls;
  m.job = 0;
  m.transport = site_.transport;
  mesh_ = std::make_unique<transport::Mesh>(io_.get_executor(), m, connection_executor_);
  mesh_->set_control_handler([this](const std::string& peer, const transport::FrameHeader& h, Buffer payload) {
    return on_mesh_frame(peer, h, std::move(payload));
  });
  mesh_->set_link_handler([this](const std::string& peer, bool up, const Status& why) {
    if (!active_) return;
    if (up) active_->on_link_up(peer);
    else active_->on_link_lost(peer, why);
  });
  GEOLOCO_TRY(mesh_->start());

  std::error_code ec;
  fs::create_directories(fs::path(site_.control_socket).parent_path(), ec);
  auto control = control::ControlServer::open(io_.get_executor(), site_.control_socket, options_.control_group,
                                              [this](const nlohmann::json& request, control::ReplyFn reply) {
                                                return handle_request(request, std::move(reply));
                                              });
  if (!control.ok()) return control.status();
  control_ = std::move(*control);

  auto http = MetricsHttpServer::open(io_.get_executor(), site_.metrics.host, site_.metrics.port,
                                      [this] { return render_metrics(); });
  if (!http.ok()) return http.status();
  metrics_http_ = std::move(*http);

  fs::create_directories(fs::path(site_.data_dir) / "jobs", ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot create ", site_.data_dir, "/jobs: ", ec.message());
  spdlog::info("site {} listening on {}:{} (peers: {}), control socket {}, metrics http://{}:{}/metrics", site_.name,
               site_.listen.host, mesh_->port(), site_.peers.size(), site_.control_socket, site_.metrics.host,
               site_.metrics.port);
  check_certificates(false);
  watch_certificates();
  resume_jobs();
  return {};
}

void SiteDaemon::resume_jobs() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(site_.data_dir) / "jobs", ec)) {
    const fs::path yaml_path = entry.path() / "job.yaml";
    if (!fs::exists(entry.path() / "status.json") || !fs::exists(yaml_path)) continue;
    auto status = read_status_file(entry.path().string());
    if (!status.ok()) {
      spdlog::warn("job folder {} is not resumed: {}", entry.path().string(), status.status().message());
      continue;
    }
    const auto state = job_state_name(status->state);
    const std::string file = status->file.empty() ? yaml_path.string() : status->file;
    if (status->state != JobState::starting && status->state != JobState::running && status->state != JobState::stopped)
      continue;
    if (active_) {
      spdlog::warn("job folder {} was {} too; only one job runs at a time, it stays stopped", entry.path().string(),
                   state);
      continue;
    }
    auto job = start_job(read_file(yaml_path), file);
    if (job.ok()) spdlog::info("resumed job {} ({} when geolocod last stopped)", (*job)->spec().name, state);
    else spdlog::error("cannot resume the job in {}: {}", entry.path().string(), job.status().message());
  }
}

Result<std::shared_ptr<JobRun>> SiteDaemon::start_job(const std::string& yaml, const std::string& file) {
  GEOLOCO_RETURN_IF(stopping_, Err::invalid_argument, "geolocod is stopping");
  auto doc = yaml::load_text(yaml, file);
  if (!doc.ok()) return doc.status();
  auto spec = job::parse_job_yaml(*doc, file, federation());
  if (!spec.ok()) return spec.status();
  if (active_ && !active_->done()) {
    GEOLOCO_RETURN_IF(active_->spec().name == spec->name, Err::invalid_argument, "job '", spec->name,
                      "' is already running on ", site_.name);
    return GEOLOCO_ERROR(Err::invalid_argument, "job '", active_->spec().name, "' is running on ", site_.name,
                         "; a site runs one job at a time (geoloco cancel ", active_->spec().name, " first)");
  }
  // A job name is used once: a finished, failed or cancelled job keeps its
  // folder (checkpoint, journal, logs), and reusing it would mix two runs.
  const fs::path job_dir = fs::path(site_.data_dir) / "jobs" / spec->name;
  if (fs::exists(job_dir / "status.json")) {
    auto previous = read_status_file(job_dir.string());
    const bool ended = previous.ok() && (previous->state == JobState::finished || previous->state == JobState::failed ||
                                         previous->state == JobState::cancelled);
    GEOLOCO_RETURN_IF(ended, Err::invalid_argument, "job '", spec->name, "' already ran on ", site_.name, " (",
                      job_state_name(previous->state), "); its folder ", job_dir.string(),
                      " keeps its checkpoint and logs: give the job another name");
  }
  JobEnvironment env;
  env.executor = io_.get_executor();
  env.mesh = mesh_.get();
  env.site = site_;
  env.metrics = &metrics_;
  env.trainer_program = options_.trainer_program;
  auto job = JobRun::create(env, *spec, yaml, file);
  if (!job.ok()) return job.status();
  if (active_) past_.push_back(active_);
  // Another job's frames are refused from now on (a replayed frame of an earlier job included).
  mesh_->set_job((*job)->id());
  active_ = *job;
  if (Status s = active_->start(); !s.ok()) {
    active_.reset();
    return s;
  }
  const Office office = active_->office();
  spdlog::info("job {} started here (coordinator {}{}, sites {})", spec->name,
               office.coordinator.empty() ? std::string("being elected") : office.coordinator,
               office.epoch > 0 ? cat(", epoch ", office.epoch) : std::string(), spec->sites.size());
  return *job;
}

void SiteDaemon::send_federation(const std::string& peer, const ControlMessage& message) {
  const std::string text = encode_control(message);
  asio::co_spawn(
      io_,
      [this, peer, text]() -> asio::awaitable<void> {
        transport::FrameHeader h;
        h.type = transport::FrameType::control;
        h.job = 0;
        Status sent;
        // The peer may still be connecting: retry for a while.
        for (int attempt = 0; attempt < 30 && !stopping_; ++attempt) {
          sent = co_await mesh_->send_control_frame(peer, h, std::as_bytes(std::span<const char>(text)));
          if (sent.ok()) co_return;
          asio::steady_timer t(io_, std::chrono::milliseconds(500));
          co_await t.async_wait(asio::use_awaitable);
        }
        spdlog::error("cannot reach {} with a federation message: {}", peer, sent.message());
      },
      asio::detached);
}

void SiteDaemon::distribute(const job::JobSpec& spec, const std::string& yaml, const std::string& file) {
  for (const auto& site : spec.sites)
    if (site != site_.name) send_federation(site, JobStartMessage{spec.name, file, yaml});
}

Status SiteDaemon::on_mesh_frame(const std::string& peer, const transport::FrameHeader& h, Buffer payload) {
  const std::span<const std::byte> bytes(payload.data(), payload.size());
  if (h.job == 0) {
    GEOLOCO_RETURN_IF(h.type != transport::FrameType::control, Err::malformed, "a state frame outside a job from ",
                      peer);
    auto message = decode_control(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    if (!message.ok()) return message.status();
    on_federation_message(peer, *message);
    return {};
  }
  GEOLOCO_RETURN_IF(!active_ || active_->id() != h.job, Err::mismatch, "frame from ", peer, " for job id ", h.job,
                    ", which does not run here");
  return active_->on_frame(peer, h, bytes);
}

void SiteDaemon::on_federation_message(const std::string& peer, const ControlMessage& message) {
  if (const auto* start = std::get_if<JobStartMessage>(&message)) {
    auto doc = yaml::load_text(start->yaml, start->file);
    auto spec = doc.ok() ? job::parse_job_yaml(*doc, start->file, federation()) : Result<job::JobSpec>(doc.status());
    if (!spec.ok()) {
      spdlog::error("job '{}' from {} refused: {}", start->job, peer, spec.status().message());
      return;
    }
    const bool from_coordinator = peer == spec->coordinator;
    const bool forwarded_to_us = spec->coordinator == site_.name;
    if (!from_coordinator && !forwarded_to_us) {
      spdlog::error("job '{}' from {} refused: only its coordinator {} hands a job out", start->job, peer,
                    spec->coordinator);
      return;
    }
    if (active_ && active_->spec().name == spec->name && !active_->done()) return;  // already running
    auto job = start_job(start->yaml, start->file);
    if (!job.ok()) {
      spdlog::error("job '{}' from {} not started: {}", start->job, peer, job.status().message());
      return;
    }
    if (forwarded_to_us) distribute(*spec, start->yaml, start->file);
    return;
  }
  if (const auto* c = std::get_if<JobCancelMessage>(&message)) {
    const std::string name = c->job, reason = c->reason;
    asio::co_spawn(
        io_, [this, name, reason]() -> asio::awaitable<void> { (void)co_await cancel(name, reason, false); },
        asio::detached);
    return;
  }
  spdlog::warn("{} sent {} outside a job", peer, control_type_name(message));
}

std::shared_ptr<JobRun> SiteDaemon::find(const std::string& name) const {
  if (active_ && active_->spec().name == name) return active_;
  for (auto it = past_.rbegin(); it != past_.rend(); ++it)
    if ((*it)->spec().name == name) return *it;
  return nullptr;
}

Result<nlohmann::json> SiteDaemon::submit(const std::string& yaml, const std::string& file) {
  auto doc = yaml::load_text(yaml, file);
  if (!doc.ok()) return doc.status();
  auto spec = job::parse_job_yaml(*doc, file, federation());
  if (!spec.ok()) return spec.status();
  nlohmann::json reply{{"job", spec->name}, {"coordinator", spec->coordinator}, {"sites", spec->sites}};
  if (spec->coordinator == site_.name) {
    auto job = start_job(yaml, file);
    if (!job.ok()) return job.status();
    distribute(*spec, yaml, file);
    reply["message"] = cat("job ", spec->name, " started on ", site_.name, " (coordinator) and sent to ",
                           spec->sites.size() - 1, " other site(s)");
  } else {
    if (active_ && !active_->done() && active_->spec().name != spec->name)
      return GEOLOCO_ERROR(Err::invalid_argument, "job '", active_->spec().name, "' is running on ", site_.name,
                           "; a site runs one job at a time (geoloco cancel ", active_->spec().name, " first)");
    send_federation(spec->coordinator, JobStartMessage{spec->name, file, yaml});
    reply["message"] = cat("job ", spec->name, " validated and handed to its coordinator ", spec->coordinator,
                           ", which starts it on every site");
  }
  return reply;
}

asio::awaitable<Status> SiteDaemon::cancel(const std::string& name, const std::string& reason, bool tell_sites) {
  auto job = find(name);
  if (!job)
    co_return GEOLOCO_ERROR(Err::invalid_argument, "no job named '", name, "' on ", site_.name,
                            " (geoloco status lists the jobs)");
  if (tell_sites)
    for (const auto& site : job->spec().sites)
      if (site != site_.name) send_federation(site, JobCancelMessage{name, reason});
  if (!job->done()) co_await job->stop(JobState::cancelled, reason);
  co_return Status{};
}

asio::awaitable<Status> SiteDaemon::handle_request(const nlohmann::json& request, control::ReplyFn reply) {
  // Every field is checked for its type first: a request with a number
  // where a name belongs gets an answer naming the field.
  auto command = control::request_string(request, "command");
  auto job_field = control::request_string(request, "job");
  auto file_field = control::request_string(request, "file", "job.yaml");
  for (const auto* field : {&command, &job_field, &file_field})
    if (!field->ok()) co_return field->status();
  const std::string name = *job_field;
  if (*command == "submit") {
    auto yaml = control::request_string(request, "yaml");
    if (!yaml.ok()) co_return yaml.status();
    if (!request.contains("yaml"))
      co_return GEOLOCO_ERROR(Err::invalid_argument, "submit needs the job file's text in \"yaml\"");
    auto result = submit(*yaml, *file_field);
    if (!result.ok()) co_return result.status();
    co_await reply(*result);
    co_return Status{};
  }
  if (*command == "status") {
    nlohmann::json jobs = nlohmann::json::array();
    const std::string& only = name;
    for (const auto& j : past_)
      if (only.empty() || j->spec().name == only) jobs.push_back(j->status());
    if (active_ && (only.empty() || active_->spec().name == only)) jobs.push_back(active_->status());
    if (!only.empty() && jobs.empty())
      co_return GEOLOCO_ERROR(Err::invalid_argument, "no job named '", only, "' on ", site_.name,
                              " (geoloco status lists the jobs)");
    nlohmann::json line;
    line["site"] = site_.name;
    line["jobs"] = jobs;
    co_await reply(line);
    co_return Status{};
  }
  if (*command == "watch") {
    auto job = find(name);
    if (!job)
      co_return GEOLOCO_ERROR(Err::invalid_argument, "no job named '", name, "' on ", site_.name,
                              " (geoloco status lists the jobs)");
    std::optional<std::uint64_t> shown;  // the last round shown (records are in round order)
    JobState last_state = JobState::starting;
    Office last_office{0, job->spec().coordinator};
    bool first = true;
    for (;;) {
      const auto& records = job->records();
      const bool fresh = !records.empty() && (!shown || records.back().round > *shown);
      const auto eval = fresh ? job->eval_losses() : std::map<std::uint64_t, double>{};
      for (std::size_t i = 0; fresh && i < records.size(); ++i) {
        if (shown && records[i].round <= *shown) continue;
        nlohmann::json line;
        line["round"] = record_json(records[i], eval);
        shown = records[i].round;
        const bool alive = co_await reply(line);
        if (!alive) co_return Status{};
      }
      if (first || job->state() != last_state) {
        first = false;
        last_state = job->state();
        const std::string text = cat("job ", name, " is ", job_state_name(last_state),
                                     job->message().empty() ? std::string() : ": " + job->message());
        nlohmann::json line;
        line["event"] = text;
        line["state"] = std::string(job_state_name(last_state));
        const bool alive = co_await reply(line);
        if (!alive) co_return Status{};
      }
      if (const Office office = job->office(); !(office == last_office)) {
        last_office = office;
        nlohmann::json line;
        line["event"] = office.coordinator.empty()
                            ? cat("the coordinator's office is being elected (epoch ", office.epoch, ")")
                            : cat("coordinator ", office.coordinator, " (epoch ", office.epoch, ")");
        const bool alive = co_await reply(line);
        if (!alive) co_return Status{};
      }
      if (job->done()) break;
      co_await job->wait_changed();
    }
    if (job->state() == JobState::finished) co_return Status{};
    co_return GEOLOCO_ERROR(Err::invalid_argument, "job ", name, " is ", job_state_name(job->state()), ": ",
                            job->message());
  }
  if (*command == "cancel") {
    Status s = co_await cancel(name, cat("cancelled on ", site_.name, " with geoloco cancel"), true);
    if (!s.ok()) co_return s;
    nlohmann::json line;
    line["job"] = name;
    line["message"] = cat("job ", name, " cancelled on ", site_.name, " and on its other sites");
    co_await reply(line);
    co_return Status{};
  }
  co_return GEOLOCO_ERROR(Err::invalid_argument, "unknown command '", *command,
                          "' (known: submit, status, watch, cancel)");
}

std::string SiteDaemon::summary() const {
  if (!active_) return cat("site ", site_.name, ": no job");
  return cat("site ", site_.name, ": job ", active_->spec().name, " ", job_state_name(active_->state()), ", ",
             active_->message());
}

asio::awaitable<void> SiteDaemon::shutdown() {
  stopping_ = true;
  if (active_ && !active_->done()) co_await active_->stop(JobState::stopped, "geolocod stopped");
  if (control_) control_->close();
  if (metrics_http_) metrics_http_->close();
  if (mesh_) mesh_->stop();
}

}  // namespace geoloco::daemon
