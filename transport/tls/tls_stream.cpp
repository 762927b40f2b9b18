#include "transport/tls/tls_stream.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <asio/experimental/as_tuple.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "common/status.h"

namespace geoloco::transport::tls {

namespace {
using asio::use_awaitable;
using asio::experimental::as_tuple;

constexpr std::size_t kIoSize = 256 * 1024;
constexpr std::size_t kRingSize = 1024 * 1024;  // per direction; holds several slices of records

std::error_code tls_error() { return std::make_error_code(std::errc::protocol_error); }
}  // namespace

TlsStream::TlsStream(asio::ip::tcp::socket socket, SSL_CTX* context)
    : socket_(std::move(socket)), socket_write_lock_(socket_.get_executor()) {
  ssl_ = SSL_new(context);
  BIO* internal = nullptr;
  BIO_new_bio_pair(&internal, kRingSize, &network_, kRingSize);
  SSL_set_bio(ssl_, internal, internal);  // the SSL owns its end
  // A full ring makes SSL_write return what it wrote so far; we flush and go on.
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

TlsStream::~TlsStream() {
  SSL_free(ssl_);
  BIO_free(network_);
}

std::string TlsStream::openssl_error(const char* what) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return what;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  const char* reason = ERR_reason_error_string(e);
  return cat(what, ": ", reason != nullptr ? reason : buf);
}

// Sends the ciphertext OpenSSL has written, straight from the pair's ring.
// The region being sent is not consumed until the write completes, so a read
// that makes OpenSSL append meanwhile (a post-handshake message) cannot move it.
asio::awaitable<std::error_code> TlsStream::flush() {
  co_await socket_write_lock_.lock();
  std::error_code result;
  for (;;) {
    char* data = nullptr;
    const int pending = BIO_nread0(network_, &data);
    if (pending <= 0) break;
    auto [ec, written] = co_await asio::async_write(socket_, asio::buffer(data, static_cast<std::size_t>(pending)),
                                                    as_tuple(use_awaitable));
    if (ec) {
      result = ec;
      break;
    }
    BIO_nread(network_, &data, pending);
  }
  socket_write_lock_.unlock();
  co_return result;
}

// Reads what the socket has straight into the pair's ring.
asio::awaitable<std::error_code> TlsStream::fill() {
  char* space = nullptr;
  const int room = BIO_nwrite0(network_, &space);
  if (room <= 0) co_return std::make_error_code(std::errc::no_buffer_space);  // OpenSSL consumes before we refill
  auto [ec, n] =
      co_await socket_.async_read_some(asio::buffer(space, static_cast<std::size_t>(room)), as_tuple(use_awaitable));
  if (ec) co_return ec;
  BIO_nwrite(network_, &space, static_cast<int>(n));
  co_return std::error_code();
}

asio::awaitable<std::string> TlsStream::handshake(bool as_client) {
  if (as_client) SSL_set_connect_state(ssl_);
  else SSL_set_accept_state(ssl_);
  for (;;) {
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl_);
    const int err = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl_, r);
    const std::string failure = (err == SSL_ERROR_NONE || err == SSL_ERROR_WANT_READ) ? "" : openssl_error("TLS error");
    // Send what the handshake produced, including a fatal alert on failure.
    const std::error_code sent = co_await flush();
    if (sent && failure.empty()) co_return sent.message();
    if (err == SSL_ERROR_NONE) co_return std::string();
    if (!failure.empty()) co_return failure;
    const std::error_code received = co_await fill();
    if (received == asio::error::eof) co_return std::string("the peer closed the connection during the handshake");
    if (received) co_return received.message();
  }
}

asio::awaitable<std::pair<std::error_code, std::size_t>> TlsStream::write(std::span<const asio::const_buffer> buffers) {
  std::size_t total = 0;
  for (const auto& b : buffers) {
    const char* p = static_cast<const char*>(b.data());
    std::size_t left = b.size();
    while (left > 0) {
      std::size_t written = 0;
      ERR_clear_error();
      if (SSL_write_ex(ssl_, p, std::min(left, kIoSize), &written) != 1) {
        if (SSL_get_error(ssl_, 0) != SSL_ERROR_WANT_WRITE) co_return std::pair{tls_error(), total};
        written = 0;  // the ring is full: send it, then go on
      }
      p += written;
      left -= written;
      total += written;
      if (written == 0 || BIO_ctrl_pending(network_) >= kIoSize) {
        const std::error_code ec = co_await flush();
        if (ec) co_return std::pair{ec, total};
      }
    }
  }
  std::error_code ec = co_await flush();
  co_return std::pair{ec, total};
}

asio::awaitable<std::pair<std::error_code, std::size_t>> TlsStream::read(asio::mutable_buffer out) {
  char* p = static_cast<char*>(out.data());
  std::size_t got = 0;
  while (got < out.size()) {
    std::size_t n = 0;
    ERR_clear_error();
    if (SSL_read_ex(ssl_, p + got, out.size() - got, &n) == 1) {
      got += n;
      continue;
    }
    // The reader never flushes: the ring also holds the writer's records, and
    // waiting here for the socket write lock could deadlock two peers that
    // both write. The rare bytes a read produces (an answer to a peer's key
    // update) leave with the next write; keepalives guarantee there is one.
    const int err = SSL_get_error(ssl_, 0);
    if (err == SSL_ERROR_ZERO_RETURN) co_return std::pair{std::error_code(asio::error::eof), got};
    if (err != SSL_ERROR_WANT_READ) co_return std::pair{tls_error(), got};
    const std::error_code ec = co_await fill();
    if (ec) co_return std::pair{ec, got};
  }
  co_return std::pair{std::error_code(), got};
}

}  // namespace geoloco::transport::tls
