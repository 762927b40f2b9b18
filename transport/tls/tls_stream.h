// TLS over a TCP socket, with OpenSSL driven through a BIO pair and asio
// doing the socket I/O. Unlike asio::ssl::stream, which moves one 16 KiB
// record per system call through fixed 17 KiB buffers, this batches: a write
// encrypts up to 256 KiB of records and sends them with one call, and a read
// takes whatever the socket has at once. The socket reads into and writes
// from the pair's own ring buffers (BIO_nwrite0 / BIO_nread0), so ciphertext
// is never copied in user space.
//
// One TlsStream is used from one executor. Reads and writes may be pending
// at the same time (the connection has one reader and serialized writers);
// bytes that OpenSSL produces while reading (TLS 1.3 post-handshake
// messages; session tickets are off) leave with the next write.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/buffer.hpp>
#include <asio/ip/tcp.hpp>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "common/async_util.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;
typedef struct bio_st BIO;

namespace geoloco::transport::tls {

class TlsStream {
 public:
  TlsStream(asio::ip::tcp::socket socket, SSL_CTX* context);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  /// Runs the handshake. On failure returns the reason in words.
  asio::awaitable<std::string> handshake(bool as_client);
  /// Encrypts and sends every buffer. Returns the error and the plaintext bytes sent.
  asio::awaitable<std::pair<std::error_code, std::size_t>> write(std::span<const asio::const_buffer> buffers);
  /// Reads exactly out.size() plaintext bytes.
  asio::awaitable<std::pair<std::error_code, std::size_t>> read(asio::mutable_buffer out);

  asio::ip::tcp::socket& socket() { return socket_; }
  SSL* native_handle() { return ssl_; }
  asio::any_io_executor get_executor() { return socket_.get_executor(); }

 private:
  asio::awaitable<std::error_code> flush();
  asio::awaitable<std::error_code> fill();
  std::string openssl_error(const char* what);

  asio::ip::tcp::socket socket_;
  SSL* ssl_ = nullptr;
  BIO* network_ = nullptr;  // our end of the pair: ciphertext in from and out to the socket
  AsyncMutex socket_write_lock_;
};

}  // namespace geoloco::transport::tls
