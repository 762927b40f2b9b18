#include "transport/loopback.h"

#include <unistd.h>

#include <atomic>

namespace geoloco::transport::loopback {

namespace {
std::atomic<int> counter{0};
}

Result<std::unique_ptr<Federation>> Federation::create(const std::vector<std::string>& sites) {
  auto dir = std::filesystem::temp_directory_path() /
             ("geoloco-fed-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::unique_ptr<Federation> f(new Federation(dir));
  GEOLOCO_TRY(create_ca((dir / "ca").string(), "loopback federation"));
  for (const auto& site : sites) GEOLOCO_TRY(issue_site_cert((dir / "ca").string(), site, (dir / site).string()));
  return f;
}

Federation::~Federation() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

tls::TlsFiles Federation::files(const std::string& site) const {
  return {(dir_ / site / "ca.pem").string(), (dir_ / site / "site.pem").string(), (dir_ / site / "site.key").string(),
          ""};
}

Result<tls::TlsFiles> Federation::issue(const std::string& site, const std::string& name, const CertOptions& options) {
  GEOLOCO_TRY(issue_site_cert((dir_ / "ca").string(), site, (dir_ / name).string(), options));
  return files(name);
}

TransportOptions test_options() {
  TransportOptions o;
  o.connections_per_peer = 2;
  o.chunk_elements = 4096;
  o.read_timeout_ms = 1500;
  o.write_timeout_ms = 1500;
  o.keepalive_interval_ms = 300;
  o.connect_timeout_ms = 3000;
  o.reconnect_initial_ms = 20;
  o.reconnect_max_ms = 200;
  o.io_threads = 2;
  return o;
}

Result<std::unique_ptr<Site>> Site::create(const std::string& name, const tls::TlsFiles& files,
                                           const TransportOptions& options, std::uint64_t job,
                                           const std::vector<std::string>& peers, std::uint16_t port) {
  std::unique_ptr<Site> site(new Site(name));
  MeshOptions m;
  m.site = name;
  m.listen_port = port;
  m.tls = files;
  m.job = job;
  m.transport = options;
  for (const auto& p : peers)
    if (p != name) m.peers.push_back({p, "127.0.0.1", 0});
  site->io_threads_ = std::make_unique<IoThreads>(options.io_threads);
  site->mesh_ = std::make_unique<Mesh>(site->io_.get_executor(), m, site->io_threads_->executor());
  GEOLOCO_TRY(site->mesh_->listen());
  return site;
}

Status Site::connect(const std::vector<Site*>& all) {
  for (Site* other : all)
    if (other != this) mesh_->set_peer_address({other->name_, "127.0.0.1", other->port()});
  GEOLOCO_TRY(mesh_->start());
  thread_ = std::thread([this] { io_.run(); });
  return {};
}

void Site::freeze() {
  io_.stop();
  if (thread_.joinable()) thread_.join();
  io_threads_->pause();
  frozen_ = true;
}

Site::~Site() {
  if (!frozen_ && thread_.joinable()) {
    call([this] {
      mesh_->stop();
      return 0;
    });
    work_.reset();
    thread_.join();  // handlers end once sockets close and timers lapse
  } else {
    io_threads_->resume();
    io_.restart();
    asio::post(io_, [this] { mesh_->stop(); });
    work_.reset();
    io_.run();
  }
  io_threads_->join();
  mesh_.reset();  // before the I/O threads' context, which its sockets belong to
}

Result<std::vector<std::unique_ptr<Site>>> make_sites(const Federation& federation,
                                                      const std::vector<std::string>& names,
                                                      const TransportOptions& options, std::uint64_t job,
                                                      std::vector<std::string> peers) {
  if (peers.empty()) peers = names;
  std::vector<std::unique_ptr<Site>> sites;
  for (const auto& n : names) {
    auto site = Site::create(n, federation.files(n), options, job, peers);
    if (!site.ok()) return site.status();
    sites.push_back(std::move(*site));
  }
  std::vector<Site*> raw;
  for (auto& s : sites) raw.push_back(s.get());
  for (auto& s : sites) GEOLOCO_TRY(s->connect(raw));
  for (auto& s : sites) {
    Site* site = s.get();
    Status ok =
        site->spawn([site, names]() { return site->mesh().wait_connected(names, std::chrono::seconds(20)); }).get();
    if (!ok.ok()) return ok;
  }
  return sites;
}

void record_control_frames(Site& site, std::vector<std::string>& into) {
  site.call([&] {
    site.mesh().set_control_handler([&into](const std::string& peer, const FrameHeader& h, Buffer payload) {
      into.push_back(
          cat(peer, ":", h.round, ":", std::string(reinterpret_cast<const char*>(payload.data()), payload.size())));
      return Status();
    });
    return 0;
  });
}

}  // namespace geoloco::transport::loopback
