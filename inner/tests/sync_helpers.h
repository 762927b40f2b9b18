// Helpers of the trainer-with-daemon tests: bit-for-bit comparison of
// parameters, and the daemon side of the sync protocol on a socket.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <span>
#include <string>

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

}  // namespace geoloco::inner::testing
