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

std::error_code tls_error() { return std::make_error_code(std::errc::protocol_error); }
}  // namespace

TlsStream::TlsStream(asio::ip::tcp::socket socket, SSL_CTX* context)
    : socket_(std::move(socket)), read_buffer_(kIoSize), socket_write_lock_(socket_.get_executor()) {
  ssl_ = SSL_new(context);
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(in_, -1);  // empty means "wait for more", not end of stream
  SSL_set_bio(ssl_, in_, out_);      // the SSL owns both BIOs now
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

std::string TlsStream::openssl_error(const char* what) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return what;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  const char* reason = ERR_reason_error_string(e);
  return cat(what, ": ", reason != nullptr ? reason : buf);
}

// Sends whatever OpenSSL has written into out_. The bytes are copied out of
// the BIO first: a read may append to it while the socket write is pending.
asio::awaitable<std::error_code> TlsStream::flush() {
  co_await socket_write_lock_.lock();
  std::error_code result;
  for (;;) {
    const std::size_t pending = BIO_ctrl_pending(out_);
    if (pending == 0) break;
    write_buffer_.resize(pending);
    const int n = BIO_read(out_, write_buffer_.data(), static_cast<int>(pending));
    if (n <= 0) break;
    auto [ec, written] =
        co_await asio::async_write(socket_, asio::buffer(write_buffer_.data(), n), as_tuple(use_awaitable));
    if (ec) {
      result = ec;
      break;
    }
  }
  socket_write_lock_.unlock();
  co_return result;
}

asio::awaitable<std::error_code> TlsStream::fill() {
  auto [ec, n] = co_await socket_.async_read_some(asio::buffer(read_buffer_), as_tuple(use_awaitable));
  if (ec) co_return ec;
  BIO_write(in_, read_buffer_.data(), static_cast<int>(n));
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
      const std::size_t n = std::min(left, kIoSize);
      std::size_t written = 0;
      ERR_clear_error();
      if (SSL_write_ex(ssl_, p, n, &written) != 1) co_return std::pair{tls_error(), total};
      p += written;
      left -= written;
      total += written;
      // Send each slice of records as it is ready, so memory stays bounded.
      if (BIO_ctrl_pending(out_) >= kIoSize) {
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
    const int err = SSL_get_error(ssl_, 0);
    if (BIO_ctrl_pending(out_) > 0) {  // e.g. a key update answer
      const std::error_code ec = co_await flush();
      if (ec) co_return std::pair{ec, got};
    }
    if (err == SSL_ERROR_ZERO_RETURN) co_return std::pair{std::error_code(asio::error::eof), got};
    if (err != SSL_ERROR_WANT_READ) co_return std::pair{tls_error(), got};
    const std::error_code ec = co_await fill();
    if (ec) co_return std::pair{ec, got};
  }
  co_return std::pair{std::error_code(), got};
}

}  // namespace geoloco::transport::tls
