// Test scaffolding for the transport: a federation of certificates in a
// temporary directory, and sites that each run a Mesh on their own
// io_context thread, as separate daemons would.
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
#include "transport/mesh.h"

namespace geoloco::transport::test {

/// A CA and one certificate per site under a fresh temporary directory.
class Federation {
 public:
  explicit Federation(const std::vector<std::string>& sites);
  ~Federation();
  tls::TlsFiles files(const std::string& site) const;
  std::filesystem::path dir() const { return dir_; }
  /// Issues another certificate (e.g. expired) into dir()/name.
  tls::TlsFiles issue(const std::string& site, const std::string& name, const CertOptions& options);

 private:
  std::filesystem::path dir_;
};

/// Transport options for tests: small chunks and short timeouts.
TransportOptions fast_options();

class Site {
 public:
  /// Creates the mesh and binds its listener; call connect() once every
  /// site's port is known.
  Site(const std::string& name, const tls::TlsFiles& files, const TransportOptions& options, std::uint64_t job,
       const std::vector<std::string>& peers);
  ~Site();
  std::uint16_t port() const { return mesh_->port(); }
  /// Starts dialing and accepting, then runs the io_context on its thread.
  void connect(const std::vector<Site*>& all);
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
  std::string name_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::unique_ptr<Mesh> mesh_;
  std::thread thread_;
  bool frozen_ = false;
};

/// Sites named `names`, each peered with all others, connected.
std::vector<std::unique_ptr<Site>> make_sites(Federation& federation, const std::vector<std::string>& names,
                                              const TransportOptions& options, std::uint64_t job = 1);

}  // namespace geoloco::transport::test
