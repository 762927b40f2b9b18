#include "transport/tests/harness.h"

#include <unistd.h>

#include <atomic>
#include <stdexcept>

namespace geoloco::transport::test {

namespace {
std::atomic<int> counter{0};
}

Federation::Federation(const std::vector<std::string>& sites) {
  dir_ = std::filesystem::temp_directory_path() /
         ("geoloco-fed-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir_);
  Status s = create_ca((dir_ / "ca").string(), "test federation");
  if (!s.ok()) throw std::runtime_error(s.to_string());
  for (const auto& site : sites) {
    s = issue_site_cert((dir_ / "ca").string(), site, (dir_ / site).string());
    if (!s.ok()) throw std::runtime_error(s.to_string());
  }
}

Federation::~Federation() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

tls::TlsFiles Federation::files(const std::string& site) const {
  return {(dir_ / site / "ca.pem").string(), (dir_ / site / "site.pem").string(), (dir_ / site / "site.key").string()};
}

tls::TlsFiles Federation::issue(const std::string& site, const std::string& name, const CertOptions& options) {
  Status s = issue_site_cert((dir_ / "ca").string(), site, (dir_ / name).string(), options);
  if (!s.ok()) throw std::runtime_error(s.to_string());
  return files(name);
}

TransportOptions fast_options() {
  TransportOptions o;
  o.connections_per_peer = 2;
  o.chunk_elements = 4096;
  o.read_timeout_ms = 1500;
  o.write_timeout_ms = 1500;
  o.keepalive_interval_ms = 300;
  o.connect_timeout_ms = 3000;
  o.reconnect_initial_ms = 20;
  o.reconnect_max_ms = 200;
  return o;
}

Site::Site(const std::string& name, const tls::TlsFiles& files, const TransportOptions& options, std::uint64_t job,
           const std::vector<std::string>& peers)
    : name_(name), work_(io_.get_executor()) {
  MeshOptions m;
  m.site = name;
  m.tls = files;
  m.job = job;
  m.transport = options;
  for (const auto& p : peers)
    if (p != name) m.peers.push_back({p, "127.0.0.1", 0});
  mesh_ = std::make_unique<Mesh>(io_.get_executor(), m);
  Status s = mesh_->listen();
  if (!s.ok()) throw std::runtime_error(s.to_string());
}

void Site::connect(const std::vector<Site*>& all) {
  for (Site* other : all)
    if (other != this) mesh_->set_peer_address({other->name_, "127.0.0.1", other->port()});
  Status s = mesh_->start();
  if (!s.ok()) throw std::runtime_error(s.to_string());
  thread_ = std::thread([this] { io_.run(); });
}

void Site::freeze() {
  io_.stop();
  if (thread_.joinable()) thread_.join();
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
    io_.restart();
    asio::post(io_, [this] { mesh_->stop(); });
    work_.reset();
    io_.run();
  }
}

std::vector<std::unique_ptr<Site>> make_sites(Federation& federation, const std::vector<std::string>& names,
                                              const TransportOptions& options, std::uint64_t job) {
  std::vector<std::unique_ptr<Site>> sites;
  for (const auto& n : names) sites.push_back(std::make_unique<Site>(n, federation.files(n), options, job, names));
  std::vector<Site*> raw;
  for (auto& s : sites) raw.push_back(s.get());
  for (auto& s : sites) s->connect(raw);
  for (auto& s : sites) {
    Status ok = s->spawn([&s, &names]() { return s->mesh().wait_connected(names, std::chrono::seconds(20)); }).get();
    if (!ok.ok()) throw std::runtime_error(ok.to_string());
  }
  return sites;
}

}  // namespace geoloco::transport::test
