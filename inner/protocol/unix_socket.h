// Unix-domain stream sockets for the local sync protocol: listen, connect,
// and send/receive that carry file descriptors (SCM_RIGHTS). Thin wrappers
// over the system calls that turn errno into Status; they never throw, never
// raise SIGPIPE (MSG_NOSIGNAL) and never leak a received descriptor.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::inner::protocol {

/// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

/// Longest path a sockaddr_un holds (107 bytes and the terminating zero).
inline constexpr std::size_t kMaxSocketPath = 107;

/// Binds and listens on `path`, non-blocking and close-on-exec. A socket file
/// left there by a dead process is replaced; one a live process still serves
/// is not (Err::io). The socket file is mode 0660: the owner and its group
/// may connect. Errors: invalid_argument (path too long or empty), io.
Result<UniqueFd> listen_unix(const std::string& path, int backlog = 4);

/// Connects to `path`, retrying while the socket does not exist yet or
/// refuses (the daemon may still be starting) until `timeout_ms` passes.
/// Returns a blocking, close-on-exec socket. Errors: invalid_argument,
/// timeout (naming the last refusal), io.
Result<UniqueFd> connect_unix(const std::string& path, int timeout_ms);

/// Accepts one pending connection as a non-blocking socket; nullopt when none
/// is pending. Errors: io.
Result<std::optional<UniqueFd>> accept_unix(int listen_fd);

/// The process id of the peer (SO_PEERCRED); -1 when the kernel does not say.
pid_t peer_pid(int fd);

/// Sends as many of `bytes` as the socket takes now, with `pass_fd` (when
/// >= 0) attached to the first byte. Returns the count sent: 0 when the
/// socket would block. Errors: io (the peer is gone: EPIPE, ECONNRESET).
Result<std::size_t> send_some(int fd, std::span<const std::byte> bytes, int pass_fd = -1);

/// Receives up to out.size() bytes. Descriptors that arrive with them are
/// appended to `fds` (or closed when `fds` is null). Returns the count read,
/// 0 at end of stream, nullopt when a non-blocking socket has nothing.
/// Errors: io.
Result<std::optional<std::size_t>> recv_some(int fd, std::span<std::byte> out, std::vector<UniqueFd>* fds);

/// Waits until `fd` is readable (or writable when `for_write`) or `timeout_ms`
/// passes (-1: forever). Returns false on timeout. Errors: io.
Result<bool> wait_fd(int fd, bool for_write, int timeout_ms);

}  // namespace geoloco::inner::protocol
