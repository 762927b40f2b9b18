// A framed connection to one peer: frames out (serialized among writers,
// rate-limited, sliced so the limit is smooth), headers and payloads in, with
// deadlines on every read and write and keepalives on idle links.
//
// Deadlines are enforced by a watchdog coroutine that closes the socket when
// one passes (asio's "session && watchdog" shape): closing aborts whatever
// read or write is pending, for TLS and plain TCP alike, and the reason is
// kept for the error the caller sees. This class is the abstraction;
// the TLS and plain-TCP streams beneath it are chosen by the factory.
//
// Threads: a connection does its work (encryption, hashing, socket I/O) on
// the executor of its socket, a strand of the mesh's I/O threads, so that a
// site's connections encrypt and decrypt in parallel. Its awaitable members
// may be awaited from any executor: they run on the strand and resume the
// caller on the caller's own. close(), is_open(), close_reason(), peer() and
// the byte counters may be called from any thread.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "transport/frame.h"
#include "transport/options.h"
#include "transport/rate_limiter.h"

namespace geoloco::transport {

class Connection {
 public:
  virtual ~Connection() = default;

  /// TLS handshake (no-op for plain TCP), bounded by connect_timeout_ms.
  /// Errors: io, with the reason in words (handshake_failure()).
  virtual asio::awaitable<Status> handshake(bool as_client) = 0;
  /// Checks the verified peer certificate names `site` (always ok for plain TCP).
  virtual asio::awaitable<Status> check_peer_name(std::string site) = 0;
  /// Verifies the certificate the peer presented at the handshake again,
  /// against `context`'s CA and CRL as of now (always ok for plain TCP).
  /// Errors: invalid_argument with OpenSSL's reason ("certificate revoked").
  virtual asio::awaitable<Status> verify_peer_again(std::shared_ptr<asio::ssl::context> context) = 0;
  /// The peer certificate's notAfter in Unix seconds; 0 before the
  /// handshake, and for plain TCP.
  virtual std::int64_t peer_certificate_expiry() const = 0;

  /// Seals `header` for `payload` (length, hash) and writes the frame. The
  /// payload must stay valid until this returns. Writers take turns; a frame
  /// is never interleaved with another. A goodbye frame is the last one:
  /// keepalives stop, and a write after it fails (the frame belongs on the
  /// connection that replaced this one). Errors: io (closed, timed out, peer
  /// gone, after goodbye), with the reason.
  virtual asio::awaitable<Status> write_frame(FrameHeader header, std::span<const std::byte> payload) = 0;
  /// Reads and checks the next header, skipping keepalives. Errors: as
  /// decode_header, or io.
  virtual asio::awaitable<Result<FrameHeader>> read_header() = 0;
  /// Reads `header`'s payload and verifies its hash. Errors: malformed
  /// (checksum), io.
  virtual asio::awaitable<Result<Buffer>> read_payload(const FrameHeader& header) = 0;

  /// Starts the watchdog (and keepalives) on the connection's executor.
  virtual void start() = 0;
  /// Closes the socket; pending operations fail with `reason`.
  virtual void close(const Status& reason) = 0;
  virtual bool is_open() const = 0;
  /// Why the connection closed (ok while open).
  virtual Status close_reason() const = 0;

  virtual std::uint64_t bytes_sent() const = 0;
  virtual std::uint64_t bytes_received() const = 0;

  /// The peer's site name once known; "host:port" before.
  virtual std::string peer() const = 0;
  virtual void set_peer(std::string name) = 0;
};

/// A TLS connection over `socket` (ssl_context required).
/// `pool` (owned by the mesh, which outlives its connections) supplies payload buffers.
std::shared_ptr<Connection> make_tls_connection(asio::ip::tcp::socket socket, std::shared_ptr<asio::ssl::context> ssl,
                                                const TransportOptions& options, std::shared_ptr<TokenBucket> limiter,
                                                BufferPool* pool);
/// The plain-TCP test switch (TransportOptions::insecure_plaintext_for_tests).
std::shared_ptr<Connection> make_plain_connection(asio::ip::tcp::socket socket, const TransportOptions& options,
                                                  std::shared_ptr<TokenBucket> limiter, BufferPool* pool);

}  // namespace geoloco::transport
