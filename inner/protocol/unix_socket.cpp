// Unix-domain socket wrappers (unix_socket.h).
#include "inner/protocol/unix_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace geoloco::inner::protocol {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

Result<sockaddr_un> make_address(const std::string& path) {
  GEOLOCO_RETURN_IF(path.empty(), Err::invalid_argument, "the socket path is empty");
  GEOLOCO_RETURN_IF(path.size() > kMaxSocketPath, Err::invalid_argument, "socket path '", path, "' is ", path.size(),
                    " bytes; Unix sockets allow at most ", kMaxSocketPath);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Room for a few descriptors: a peer that sends more gets them closed, not leaked.
constexpr std::size_t kMaxFdsPerRecv = 8;

}  // namespace

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<UniqueFd> listen_unix(const std::string& path, int backlog) {
  auto addr = make_address(path);
  if (!addr.ok()) return addr.status();
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    GEOLOCO_RETURN_IF(!S_ISSOCK(st.st_mode), Err::io, "'", path,
                      "' exists and is not a socket; refusing to replace it");
    // A socket file outlives its process; only a refused connect proves it stale.
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    GEOLOCO_RETURN_IF(!probe.valid(), Err::io, "socket(): ", errno_text(errno));
    bool live = ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(sockaddr_un)) == 0;
    GEOLOCO_RETURN_IF(live, Err::io, "another process is serving '", path, "'");
    GEOLOCO_RETURN_IF(::unlink(path.c_str()) != 0 && errno != ENOENT, Err::io, "cannot remove stale socket '", path,
                      "': ", errno_text(errno));
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  GEOLOCO_RETURN_IF(!fd.valid(), Err::io, "socket(): ", errno_text(errno));
  GEOLOCO_RETURN_IF(::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(sockaddr_un)) != 0, Err::io,
                    "cannot bind '", path, "': ", errno_text(errno));
  // The daemon's user and group may connect (a trainer running as another
  // user joins the group); others may not, whatever the umask made of it.
  GEOLOCO_RETURN_IF(::chmod(path.c_str(), 0660) != 0, Err::io, "cannot chmod '", path, "': ", errno_text(errno));
  GEOLOCO_RETURN_IF(::listen(fd.get(), backlog) != 0, Err::io, "cannot listen on '", path, "': ", errno_text(errno));
  return fd;
}

Result<UniqueFd> connect_unix(const std::string& path, int timeout_ms) {
  auto addr = make_address(path);
  if (!addr.ok()) return addr.status();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    GEOLOCO_RETURN_IF(!fd.valid(), Err::io, "socket(): ", errno_text(errno));
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(sockaddr_un)) == 0) return fd;
    int e = errno;
    // The daemon may not have created the socket yet: retry those two, fail the rest.
    GEOLOCO_RETURN_IF(e != ENOENT && e != ECONNREFUSED && e != EAGAIN, Err::io, "cannot connect to '", path,
                      "': ", errno_text(e));
    GEOLOCO_RETURN_IF(std::chrono::steady_clock::now() >= deadline, Err::timeout, "no daemon answered on '", path,
                      "' within ", timeout_ms, " ms (last: ", errno_text(e), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Result<std::optional<UniqueFd>> accept_unix(int listen_fd) {
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) return std::optional<UniqueFd>(UniqueFd(fd));
  // A connection that died before accept() is not an error of the listener.
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR)
    return std::optional<UniqueFd>();
  return GEOLOCO_ERROR(Err::io, "accept(): ", errno_text(errno));
}

pid_t peer_pid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
  return cred.pid;
}

Result<std::size_t> send_some(int fd, std::span<const std::byte> bytes, int pass_fd) {
  iovec iov{const_cast<std::byte*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::size_t{0};
    return GEOLOCO_ERROR(Err::io, "send: ", errno_text(errno));
  }
}

Result<std::optional<std::size_t>> recv_some(int fd, std::span<std::byte> out, std::vector<UniqueFd>* fds) {
  iovec iov{out.data(), out.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerRecv)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::optional<std::size_t>();
    return GEOLOCO_ERROR(Err::io, "receive: ", errno_text(errno));
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int passed;
      std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      UniqueFd owned(passed);
      if (fds) fds->push_back(std::move(owned));
    }
  }
  return std::optional<std::size_t>(static_cast<std::size_t>(n));
}

Result<bool> wait_fd(int fd, bool for_write, int timeout_ms) {
  pollfd p{fd, static_cast<short>(for_write ? POLLOUT : POLLIN), 0};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    int wait = timeout_ms;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait = static_cast<int>(std::max<long long>(0, left.count()));
    }
    int r = ::poll(&p, 1, wait);
    if (r > 0) return true;  // readable, or hung up/error: the next read says which
    if (r == 0) return false;
    if (errno != EINTR) return GEOLOCO_ERROR(Err::io, "poll: ", errno_text(errno));
  }
}

}  // namespace geoloco::inner::protocol
