// Options of the cross-site transport. Every field has a default that works
// across continents (100-200 ms RTT) and its unit in its name.
//
// Timeouts form one hierarchy (docs/design.md §4): keepalive_interval_ms <
// read_timeout_ms = write_timeout_ms < the daemon's heartbeat timeout < round
// deadline < stall alarm. A connection that carries no bytes for
// read_timeout_ms is dead; keepalives keep an idle one alive.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "transport/frame.h"

namespace geoloco::transport {

struct TransportOptions {
  int connections_per_peer = 4;  ///< parallel TLS connections per peer pair, to fill a long fat link
  /// Values per chunk (frame): 256 Ki fp32 = 1 MiB raw. Finer than a STATE_SYNC
  /// frame's 4 MiB so that the all-gather of early chunks overlaps the
  /// reduce-scatter of later ones: under a rate cap, 5 sites measured 1.00x
  /// the link bound with 1 MiB chunks and up to 1.18x with 4 MiB ones.
  std::uint64_t chunk_elements = 1 << 18;
  FrameLimits limits;                ///< payload bound, checked before allocating
  int read_timeout_ms = 20000;       ///< no byte from a peer for this long: the peer is dead
  int write_timeout_ms = 20000;      ///< a write that makes no progress for this long fails
  int keepalive_interval_ms = 5000;  ///< an idle connection sends a keepalive this often
  int connect_timeout_ms = 10000;    ///< TCP connect plus TLS handshake plus hello
  int reconnect_initial_ms = 200;    ///< first retry delay after a failed dial; doubles per failure
  int reconnect_max_ms = 10000;      ///< longest retry delay
  double rate_limit_mbit = 0;        ///< cap on this site's egress in Mbit/s (10^6 bit/s); 0 = none
  /// Threads that run the site's connections (TLS, hashing, socket I/O),
  /// each connection on one of them at a time, so a site encrypts and
  /// decrypts on several cores at once.
  int io_threads = 4;
  /// Test switch: plain TCP instead of TLS. The daemon refuses it outside
  /// tests; nothing in production sets it.
  bool insecure_plaintext_for_tests = false;

  /// Errors: invalid_argument naming the rule.
  Status validate() const;
  bool operator==(const TransportOptions&) const = default;
};

inline Status TransportOptions::validate() const {
  GEOLOCO_RETURN_IF(connections_per_peer < 1 || connections_per_peer > 64, Err::invalid_argument,
                    "connections_per_peer must be 1..64, got ", connections_per_peer);
  GEOLOCO_RETURN_IF(chunk_elements < 1024 || chunk_elements > (64u << 20), Err::invalid_argument,
                    "chunk_elements must be 1024..67108864, got ", chunk_elements);
  GEOLOCO_RETURN_IF(chunk_elements * 4 + 4096 > limits.max_payload_bytes, Err::invalid_argument, "max_payload_bytes (",
                    limits.max_payload_bytes, ") must hold a raw chunk of ", chunk_elements, " values");
  GEOLOCO_RETURN_IF(keepalive_interval_ms < 1 || read_timeout_ms <= keepalive_interval_ms, Err::invalid_argument,
                    "read_timeout_ms (", read_timeout_ms, ") must exceed keepalive_interval_ms (",
                    keepalive_interval_ms, "), or idle connections would time out");
  GEOLOCO_RETURN_IF(write_timeout_ms < 1 || connect_timeout_ms < 1, Err::invalid_argument,
                    "write_timeout_ms and connect_timeout_ms must be positive");
  GEOLOCO_RETURN_IF(reconnect_initial_ms < 1 || reconnect_max_ms < reconnect_initial_ms, Err::invalid_argument,
                    "reconnect_max_ms must be at least reconnect_initial_ms (>= 1)");
  GEOLOCO_RETURN_IF(io_threads < 1 || io_threads > 64, Err::invalid_argument, "io_threads must be 1..64, got ",
                    io_threads);
  GEOLOCO_RETURN_IF(rate_limit_mbit < 0, Err::invalid_argument, "the rate limit must be >= 0 (0 = no cap)");
  return {};
}

}  // namespace geoloco::transport
