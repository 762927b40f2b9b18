// Sites on one machine over loopback, for tests, benchmarks and demos: a
// federation of certificates in a temporary directory, and sites that each
// run a Mesh on their own io_context thread (and their connections on their
// own I/O threads), as separate daemons would.
#pragma once

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_future.hpp>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/certs.h"
#include "transport/io_threads.h"
#include "transport/mesh.h"

namespace geoloco::transport::loopback {

/// A CA and one certificate per site under a fresh temporary directory,
/// removed again with the object.
class Federation {
 public:
  /// Errors: io, or those of create_ca / issue_site_cert.
  static Result<std::unique_ptr<Federation>> create(const std::vector<std::string>& sites);
  ~Federation();
  tls::TlsFiles files(const std::string& site) const;
  std::filesystem::path dir() const { return dir_; }
  /// Issues another certificate for `site` (e.g. an expired one) into dir()/name.
  Result<tls::TlsFiles> issue(const std::string& site, const std::string& name, const CertOptions& options);

 private:
  explicit Federation(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path dir_;
};

/// Transport options for tests: small chunks and short timeouts.
TransportOptions test_options();

class Site {
 public:
  /// Creates the mesh and binds its listener on 127.0.0.1 (`port`, 0: any
  /// free one); call connect() once every site's port is known. Errors:
  /// those of Mesh::listen.
  static Result<std::unique_ptr<Site>> create(const std::string& name, const tls::TlsFiles& files,
                                              const TransportOptions& options, std::uint64_t job,
                                              const std::vector<std::string>& peers, std::uint16_t port = 0);
  ~Site();
  std::uint16_t port() const { return mesh_->port(); }
  /// Tells the mesh every site's port, starts it, and runs the io_context on its thread.
  Status connect(const std::vector<Site*>& all);
  /// Runs `fn` (a callable returning an awaitable) on the site's thread.
  template <class Fn>
  auto spawn(Fn fn) {
    return asio::co_spawn(io_, std::move(fn), asio::use_future);
  }
  /// Runs a plain callable on the site's thread and returns its result.
  template <class Fn>
  auto call(Fn fn) {
    using R = decltype(fn());
    auto promise = std::make_shared<std::promise<R>>();
    auto f = promise->get_future();
    asio::post(io_, [promise, fn = std::move(fn)]() mutable { promise->set_value(fn()); });
    return f.get();
  }
  /// Freezes the site as a crashed host would: its thread stops, its sockets stay open.
  void freeze();
  Mesh& mesh() { return *mesh_; }
  const std::string& name() const { return name_; }

 private:
  explicit Site(std::string name) : name_(std::move(name)), work_(io_.get_executor()) {}
  std::string name_;
  std::unique_ptr<IoThreads> io_threads_;  // the connections' threads: outlive the mesh and io_'s handlers
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::unique_ptr<Mesh> mesh_;
  std::thread thread_;
  bool frozen_ = false;
};

/// Sites named `names`, each peered with all of `peers` (default: `names`),
/// started, and connected to each other. Errors: timeout, and those of Site.
Result<std::vector<std::unique_ptr<Site>>> make_sites(const Federation& federation,
                                                      const std::vector<std::string>& names,
                                                      const TransportOptions& options, std::uint64_t job = 1,
                                                      std::vector<std::string> peers = {});

/// Makes `site` record each control frame it receives as
/// "peer:round:payload" in `into`, which only the site's thread touches
/// (read it through site.call()).
void record_control_frames(Site& site, std::vector<std::string>& into);

/// Waits for every one of `futures`, in order, and returns their values. A
/// test that checks the first result before the others have ended would
/// free buffers their operations still write.
template <class T>
std::vector<T> wait_all(std::vector<std::future<T>>& futures) {
  std::vector<T> values;
  for (auto& f : futures) values.push_back(f.get());
  return values;
}

}  // namespace geoloco::transport::loopback
