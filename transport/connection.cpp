#include "transport/connection.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <asio/experimental/as_tuple.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <chrono>

#include "common/async_util.h"
#include "transport/tls/tls_context.h"
#include "transport/tls/tls_stream.h"

namespace geoloco::transport {

namespace {

using Clock = std::chrono::steady_clock;
using asio::use_awaitable;
using asio::experimental::as_tuple;

// Writes and reads go in slices so that deadlines refresh on progress and
// the rate limit is smooth across connections.
constexpr std::size_t kSlice = 256 * 1024;

// Plain TCP with the same interface as tls::TlsStream (the test switch).
class PlainStream {
 public:
  explicit PlainStream(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}
  asio::awaitable<std::string> handshake(bool) { co_return std::string(); }
  asio::awaitable<std::pair<std::error_code, std::size_t>> write(std::span<const asio::const_buffer> buffers) {
    auto [ec, n] = co_await asio::async_write(socket_, buffers, as_tuple(use_awaitable));
    co_return std::pair{ec, n};
  }
  asio::awaitable<std::pair<std::error_code, std::size_t>> read(asio::mutable_buffer out) {
    auto [ec, n] = co_await asio::async_read(socket_, out, as_tuple(use_awaitable));
    co_return std::pair{ec, n};
  }
  asio::ip::tcp::socket& socket() { return socket_; }
  asio::any_io_executor get_executor() { return socket_.get_executor(); }

 private:
  asio::ip::tcp::socket socket_;
};

template <class Stream>
class StreamConnection final : public Connection, public std::enable_shared_from_this<StreamConnection<Stream>> {
 public:
  template <class... StreamArgs>
  StreamConnection(const TransportOptions& options, std::shared_ptr<TokenBucket> limiter, BufferPool* pool,
                   StreamArgs&&... args)
      : stream_(std::forward<StreamArgs>(args)...),
        options_(options),
        limiter_(std::move(limiter)),
        pool_(pool),
        write_lock_(stream_.get_executor()),
        watchdog_timer_(stream_.get_executor()),
        limit_timer_(stream_.get_executor()),
        keepalive_timer_(stream_.get_executor()) {
    std::error_code ec;
    auto endpoint = socket().remote_endpoint(ec);
    const std::string host =
        endpoint.address().is_v6() ? cat("[", endpoint.address().to_string(), "]") : endpoint.address().to_string();
    peer_ = ec ? "unknown peer" : cat(host, ":", endpoint.port());
    socket().set_option(asio::ip::tcp::no_delay(true), ec);
  }

  // Each public awaitable runs its work on the connection's strand and
  // resumes the caller on the caller's executor. The caller keeps the
  // connection alive (holds its shared_ptr) while it waits.
  asio::awaitable<Status> handshake(bool as_client) override { return on_strand(handshake_here(as_client)); }

  asio::awaitable<Status> check_peer_name(std::string site) override {
    return on_strand(check_peer_name_here(std::move(site)));
  }

  asio::awaitable<Status> verify_peer_again(std::shared_ptr<asio::ssl::context> context) override {
    return on_strand(verify_peer_again_here(std::move(context)));
  }

  std::int64_t peer_certificate_expiry() const override { return peer_expiry_; }

  asio::awaitable<Status> write_frame(FrameHeader header, std::span<const std::byte> payload) override {
    return on_strand(write_frame_here(header, payload));
  }

  asio::awaitable<Result<FrameHeader>> read_header() override { return on_strand(read_header_here()); }

  asio::awaitable<Result<Buffer>> read_payload(const FrameHeader& header) override {
    return on_strand(read_payload_here(header));
  }

  void start() override {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      self->start_watchdog();
      if (self->keepalive_started_) return;
      self->keepalive_started_ = true;
      asio::co_spawn(self->stream_.get_executor(), keepalive(self), asio::detached);
    });
  }

  void close(const Status& reason) override {
    {
      std::lock_guard lock(state_mutex_);
      if (!open_) return;
      open_ = false;
      close_reason_ = reason;
    }
    // The socket and timers belong to the strand: closed there, at once when
    // this runs on it, soon after otherwise.
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->close_socket(); });
  }

  bool is_open() const override { return open_; }
  Status close_reason() const override {
    std::lock_guard lock(state_mutex_);
    return close_reason_;
  }
  std::uint64_t bytes_sent() const override { return bytes_sent_; }
  std::uint64_t bytes_received() const override { return bytes_received_; }
  std::string peer() const override {
    std::lock_guard lock(state_mutex_);
    return peer_;
  }
  void set_peer(std::string name) override {
    std::lock_guard lock(state_mutex_);
    peer_ = std::move(name);
  }

 private:
  asio::ip::tcp::socket& socket() { return stream_.socket(); }

  template <class T>
  asio::awaitable<T> on_strand(asio::awaitable<T> work) {
    return asio::co_spawn(stream_.get_executor(), std::move(work), use_awaitable);
  }

  asio::awaitable<Status> handshake_here(bool as_client) {
    arm(read_deadline_, options_.connect_timeout_ms);
    start_watchdog();
    const std::string failure = co_await stream_.handshake(as_client);
    read_deadline_ = Clock::time_point::max();
    if (!failure.empty()) {
      std::string why = failure;
      if constexpr (std::is_same_v<Stream, tls::TlsStream>)
        why = tls::handshake_failure(stream_.native_handle(), failure);
      close(GEOLOCO_ERROR(Err::io, "TLS handshake with ", peer(), " failed: ", why));
      co_return close_reason();
    }
    if constexpr (std::is_same_v<Stream, tls::TlsStream>)
      peer_expiry_ = tls::peer_certificate_expiry(stream_.native_handle());
    co_return Status();
  }

  asio::awaitable<Status> verify_peer_again_here(std::shared_ptr<asio::ssl::context> context) {
    if constexpr (std::is_same_v<Stream, PlainStream>) {
      co_return Status();
    } else {
      co_return tls::verify_peer_again(stream_.native_handle(), context->native_handle());
    }
  }

  asio::awaitable<Status> check_peer_name_here(std::string site) {
    if constexpr (std::is_same_v<Stream, PlainStream>) {
      co_return Status();
    } else {
      co_return tls::check_peer_name(stream_.native_handle(), site);
    }
  }

  // TLS's records carry an AEAD tag, so the all-reduce's frames skip the
  // payload hash there (frame.h); plain TCP has nothing else to catch a
  // flipped bit, and refuses an unhashed frame.
  static constexpr bool kRecordsAuthenticated = std::is_same_v<Stream, tls::TlsStream>;

  asio::awaitable<Status> write_frame_here(FrameHeader header, std::span<const std::byte> payload) {
    header.hashed = !(kRecordsAuthenticated && may_skip_hash(header.type));
    seal(header, payload);
    co_await write_lock_.lock();
    Status s;
    if (said_goodbye_) {
      s = GEOLOCO_ERROR(Err::io, "the connection to ", peer(), " was replaced: a ", frame_type_name(header.type),
                        " frame after its goodbye");
    } else {
      // Set before the write: no keepalive may follow a goodbye, even one due while it is written.
      said_goodbye_ = header.type == FrameType::goodbye;
      s = co_await write_locked(header, payload);
    }
    write_lock_.unlock();
    co_return s;
  }

  asio::awaitable<Result<FrameHeader>> read_header_here() {
    for (;;) {
      std::array<std::byte, kFrameHeaderSize> bytes;
      Status s = co_await read_exact(bytes);
      if (!s.ok()) co_return s;
      auto header = decode_header(bytes, options_.limits);
      if (!header.ok()) co_return header.status();
      if (!kRecordsAuthenticated && !header->hashed)
        co_return GEOLOCO_ERROR(Err::malformed, "a ", frame_type_name(header->type),
                                " frame without its payload hash on a plain TCP connection, where nothing else "
                                "proves its bytes (only TLS records may stand in for it)");
      if (header->type != FrameType::keepalive) co_return header;
    }
  }

  asio::awaitable<Result<Buffer>> read_payload_here(FrameHeader header) {
    // The length was bounded by decode_header before this allocation.
    Buffer payload = pool_->acquire(static_cast<std::size_t>(header.payload_size));
    for (std::size_t done = 0; done < payload.size(); done += kSlice) {
      const std::size_t n = std::min(kSlice, payload.size() - done);
      Status s = co_await read_exact(std::span(payload).subspan(done, n));
      if (!s.ok()) co_return s;
    }
    Status v = verify_payload(header, payload);
    if (!v.ok()) co_return v;
    co_return payload;
  }

  void close_socket() {
    std::error_code ignored;
    socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
    watchdog_timer_.cancel();
    limit_timer_.cancel();
    keepalive_timer_.cancel();
  }

  std::string describe(const std::error_code& ec) const {
    if (ec == asio::error::eof) return "the peer closed the connection";
    if (ec == asio::error::connection_reset) return "the peer reset the connection";
    return ec.message();
  }

  void arm(Clock::time_point& deadline, int timeout_ms) {
    deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    watchdog_timer_.cancel();  // let the watchdog see the new deadline
  }

  Status io_error(const char* what, const std::error_code& ec) {
    close(GEOLOCO_ERROR(Err::io, what, " ", peer(), ": ", describe(ec)));
    return close_reason();
  }

  asio::awaitable<Status> read_exact(std::span<std::byte> out) {
    if (!open_) co_return close_reason();
    arm(read_deadline_, options_.read_timeout_ms);
    auto [ec, n] = co_await stream_.read(asio::buffer(out.data(), out.size()));
    bytes_received_ += n;
    // Disarmed between reads: a reader paused on purpose (waiting for its
    // round to start) is not a dead peer. While a read is pending, keepalives
    // must arrive, or the peer is dead.
    read_deadline_ = Clock::time_point::max();
    if (ec) co_return io_error("reading from", ec);
    co_return Status();
  }

  asio::awaitable<Status> write_locked(const FrameHeader& header, std::span<const std::byte> payload) {
    if (!open_) co_return close_reason();
    const auto head = encode_header(header);
    std::span<const std::byte> first(head);
    std::size_t done = 0;
    bool header_sent = false;
    while (!header_sent || done < payload.size()) {
      // The first slice carries the header; the rest carry payload.
      std::array<asio::const_buffer, 2> bufs;
      std::size_t count = 0, bytes = 0;
      if (!header_sent) bufs[count++] = asio::buffer(first.data(), first.size()), bytes += first.size();
      const std::size_t n = std::min(kSlice, payload.size() - done);
      if (n > 0) bufs[count++] = asio::buffer(payload.data() + done, n), bytes += n;
      if (limiter_ && limiter_->enabled()) {
        const auto when = limiter_->reserve(Clock::now(), bytes);
        if (when > Clock::now()) {
          limit_timer_.expires_at(when);
          co_await limit_timer_.async_wait(as_tuple(use_awaitable));
          if (!open_) co_return close_reason();
        }
      }
      arm(write_deadline_, options_.write_timeout_ms);
      auto [ec, written] = co_await stream_.write(std::span<const asio::const_buffer>(bufs.data(), count));
      write_deadline_ = Clock::time_point::max();
      bytes_sent_ += written;
      last_write_ = Clock::now();
      if (ec) co_return io_error("writing to", ec);
      header_sent = true;
      done += n;
    }
    co_return Status();
  }

  void start_watchdog() {
    if (watchdog_started_) return;
    watchdog_started_ = true;
    asio::co_spawn(stream_.get_executor(), watchdog(this->shared_from_this()), asio::detached);
  }

  // Closes the connection when a read or write deadline passes.
  static asio::awaitable<void> watchdog(std::shared_ptr<StreamConnection> self) {
    while (self->open_) {
      const auto next = std::min(self->read_deadline_, self->write_deadline_);
      self->watchdog_timer_.expires_at(std::min(next, Clock::now() + std::chrono::seconds(1)));
      co_await self->watchdog_timer_.async_wait(as_tuple(use_awaitable));
      const auto now = Clock::now();
      if (!self->open_) break;
      if (now >= self->read_deadline_) {
        self->close(GEOLOCO_ERROR(Err::timeout, "no data from ", self->peer(), " for ", self->options_.read_timeout_ms,
                                  " ms: the peer is unreachable or stopped"));
      } else if (now >= self->write_deadline_) {
        self->close(GEOLOCO_ERROR(Err::timeout, "writing to ", self->peer(), " made no progress for ",
                                  self->options_.write_timeout_ms, " ms"));
      }
    }
  }

  // Sends a keepalive when nothing was written for a keepalive interval.
  static asio::awaitable<void> keepalive(std::shared_ptr<StreamConnection> self) {
    const auto interval = std::chrono::milliseconds(self->options_.keepalive_interval_ms);
    while (self->open_) {
      self->keepalive_timer_.expires_after(interval / 2);
      co_await self->keepalive_timer_.async_wait(as_tuple(use_awaitable));
      if (!self->open_ || self->said_goodbye_) break;
      if (Clock::now() - self->last_write_ < interval) continue;
      FrameHeader h;
      h.type = FrameType::keepalive;
      (void)co_await self->write_frame_here(h, {});
    }
  }

  // Touched only on the strand.
  Stream stream_;
  TransportOptions options_;
  std::shared_ptr<TokenBucket> limiter_;
  BufferPool* pool_;
  AsyncMutex write_lock_;
  asio::steady_timer watchdog_timer_;
  asio::steady_timer limit_timer_;
  asio::steady_timer keepalive_timer_;
  Clock::time_point read_deadline_ = Clock::time_point::max();
  Clock::time_point write_deadline_ = Clock::time_point::max();
  Clock::time_point last_write_ = Clock::now();
  bool watchdog_started_ = false;
  bool keepalive_started_ = false;
  bool said_goodbye_ = false;  // a goodbye was written (or is being written): nothing may follow it
  // Read from any thread.
  std::atomic<bool> open_ = true;
  std::atomic<std::uint64_t> bytes_sent_ = 0;
  std::atomic<std::uint64_t> bytes_received_ = 0;
  std::atomic<std::int64_t> peer_expiry_ = 0;
  mutable std::mutex state_mutex_;  // guards close_reason_ and peer_
  Status close_reason_;
  std::string peer_;
};

}  // namespace

std::shared_ptr<Connection> make_tls_connection(asio::ip::tcp::socket socket, std::shared_ptr<asio::ssl::context> ssl,
                                                const TransportOptions& options, std::shared_ptr<TokenBucket> limiter,
                                                BufferPool* pool) {
  // SSL_new takes its own reference to the SSL_CTX, so `ssl` may go away first.
  return std::make_shared<StreamConnection<tls::TlsStream>>(options, std::move(limiter), pool, std::move(socket),
                                                            ssl->native_handle());
}

std::shared_ptr<Connection> make_plain_connection(asio::ip::tcp::socket socket, const TransportOptions& options,
                                                  std::shared_ptr<TokenBucket> limiter, BufferPool* pool) {
  return std::make_shared<StreamConnection<PlainStream>>(options, std::move(limiter), pool, std::move(socket));
}

}  // namespace geoloco::transport
