// Helpers of the trainer-with-daemon tests: bit-for-bit comparison of
// parameters, the daemon side of the sync protocol on a socket, and a
// forked rank's collective.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "inner/collective/launch.h"
#include "inner/collective/shm_collective.h"
#include "inner/cpu/blas.h"
#include "inner/protocol/server.h"

namespace geoloco::inner::testing {

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

inline std::unique_ptr<protocol::Server> open_server(const std::string& path, const std::string& job) {
  protocol::ServerOptions o;
  o.socket_path = path;
  o.job = job;
  auto s = protocol::Server::open(o);
  REQUIRE(s.ok());
  return std::move(*s);
}

/// In a forked rank (fork_ranks.h): one BLAS thread, and the CPU collective
/// that the launcher's environment describes.
inline Result<std::unique_ptr<Collective>> rank_collective() {
  cpu::set_blas_threads(1);
  auto launch = launch_info_from_env();
  if (!launch.ok()) return launch.status();
  return make_cpu_collective(*launch);
}

}  // namespace geoloco::inner::testing
