// geolocod as a whole (docs/design.md §2): the site's mesh to its peers, the local
// control socket (`geoloco submit/status/watch/cancel`), the metrics
// endpoint, and the jobs. A site runs one job at a time; finished,
// failed and cancelled jobs stay listed by `geoloco status`.
//
// How a job starts: `geoloco submit` hands the YAML to the local daemon,
// which validates it completely (every problem in one message) against the
// federation it knows; then the coordinator the job names starts it and
// sends it (job_start, a federation-level control frame over mTLS) to every
// other site of the job, which validates it again and starts its part. A
// job submitted on another site is forwarded to its coordinator first.
//
// Jobs survive a daemon restart: each job's folder holds its YAML and its
// state, and a job that was starting, running or stopped by a shutdown is
// started again (from its checkpoint, its journal, or a peer's state).
#pragma once

#include <asio/io_context.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/control_socket.h"
#include "daemon/job_run.h"
#include "daemon/metrics.h"
#include "daemon/metrics_http.h"
#include "daemon/site_config.h"
#include "transport/mesh.h"

namespace geoloco::daemon {

struct DaemonOptions {
  std::string trainer_program = "geoloco-train";  ///< the built-in trainer's binary
  std::string control_group = "geoloco";          ///< group allowed on the control socket
};

class SiteDaemon {
 public:
  /// `connection_executor`: the I/O threads the mesh's connections run on
  /// (transport::IoThreads); their context must outlive `io` and this.
  SiteDaemon(asio::io_context& io, asio::any_io_executor connection_executor, SiteConfig site, DaemonOptions options);
  ~SiteDaemon();

  /// Listens for peers, the CLI and metrics scrapes, and resumes the jobs
  /// found in the data folder. Errors: io (ports, sockets), invalid_argument (TLS files).
  Status start();
  /// Stops every job (the round in flight is abandoned, trainers stopped,
  /// state saved) and closes everything.
  asio::awaitable<void> shutdown();

  /// Applies a site file read again (SIGHUP): its tls section (certificate,
  /// key, CA, CRL, expiry warning) at once, live connections replaced
  /// without losing a round; other changed settings are logged as waiting
  /// for a restart. Errors (nothing changes): the TLS files' problems, a
  /// site file for another site.
  Status reload(const SiteConfig& loaded);

  /// Status text for systemd (`systemctl status`).
  std::string summary() const;
  const SiteConfig& site() const { return site_; }

 private:
  std::set<std::string> federation() const;
  Status on_mesh_frame(const std::string& peer, const transport::FrameHeader& header, Buffer payload);
  void on_federation_message(const std::string& peer, const ControlMessage& message);
  asio::awaitable<Status> handle_request(const nlohmann::json& request, control::ReplyFn reply);
  Result<nlohmann::json> submit(const std::string& yaml, const std::string& file);
  /// Validates and starts a job here. Errors: the validation's, a job already running.
  Result<std::shared_ptr<JobRun>> start_job(const std::string& yaml, const std::string& file);
  void distribute(const job::JobSpec& spec, const std::string& yaml, const std::string& file);
  void send_federation(const std::string& peer, const ControlMessage& message);
  asio::awaitable<Status> cancel(const std::string& name, const std::string& reason, bool tell_sites);
  std::shared_ptr<JobRun> find(const std::string& name) const;
  void resume_jobs();
  void declare_metrics();
  std::string render_metrics();
  /// Sets the TLS files' expiry metrics and warns about what is close to
  /// expiring (with `peers`: the connected peers' certificates too).
  void check_certificates(bool peers);
  /// Peers' certificate expiry and replaced connections, as metrics.
  void show_peer_certificates();
  /// check_certificates() a minute after start, then every 12 hours.
  void watch_certificates();

  asio::io_context& io_;
  asio::any_io_executor connection_executor_;
  SiteConfig site_;
  DaemonOptions options_;
  Metrics metrics_;
  std::unique_ptr<transport::Mesh> mesh_;
  std::unique_ptr<control::ControlServer> control_;
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  std::shared_ptr<JobRun> active_;
  std::vector<std::shared_ptr<JobRun>> past_;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> peer_bytes_;  // last scrape: sent, received
  std::uint64_t rejected_seen_ = 0;
  std::uint64_t replaced_seen_ = 0;
  bool stopping_ = false;
};

}  // namespace geoloco::daemon
