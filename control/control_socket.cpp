#include "control/control_socket.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/streambuf.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <istream>

#include "common/accept_loop.h"

namespace geoloco::control {

namespace {
using asio::use_awaitable;
using asio::experimental::as_tuple;
using asio::local::stream_protocol;

constexpr std::size_t kMaxRequestBytes = 8u << 20;  // a job file fits many times over

std::vector<gid_t> groups_of(uid_t uid, gid_t gid) {
  std::vector<gid_t> groups;
  const passwd* pw = ::getpwuid(uid);
  if (pw == nullptr) return groups;
  int count = 64;
  groups.resize(static_cast<std::size_t>(count));
  if (::getgrouplist(pw->pw_name, gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<std::size_t>(count));
    ::getgrouplist(pw->pw_name, gid, groups.data(), &count);
  }
  groups.resize(static_cast<std::size_t>(std::max(count, 0)));
  return groups;
}
}  // namespace

std::string control_refusal(const PeerCredentials& peer, uid_t daemon_uid, gid_t control_gid) {
  if (peer.uid == 0 || peer.uid == daemon_uid) return "";
  if (control_gid != static_cast<gid_t>(-1)) {
    if (peer.gid == control_gid) return "";
    for (gid_t g : peer.groups)
      if (g == control_gid) return "";
  }
  return cat("user ", peer.uid, " may not control geolocod: run as root or join the 'geoloco' group ",
             "(sudo adduser $USER geoloco, then log in again)");
}

ControlServer::ControlServer(asio::any_io_executor executor, std::string path, gid_t gid, RequestHandler handler)
    : acceptor_(executor), path_(std::move(path)), control_gid_(gid), handler_(std::move(handler)) {}

ControlServer::~ControlServer() { close(); }

void ControlServer::close() {
  if (!open_) return;
  open_ = false;
  std::error_code ignored;
  acceptor_.close(ignored);
  ::unlink(path_.c_str());
}

Result<std::unique_ptr<ControlServer>> ControlServer::open(asio::any_io_executor executor, const std::string& path,
                                                           const std::string& group_name, RequestHandler handler) {
  const group* gr = ::getgrnam(group_name.c_str());
  const gid_t gid = gr ? gr->gr_gid : static_cast<gid_t>(-1);
  std::unique_ptr<ControlServer> server(new ControlServer(executor, path, gid, std::move(handler)));
  ::unlink(path.c_str());  // a stale socket from a previous run
  std::error_code ec;
  server->acceptor_.open(stream_protocol(), ec);
  if (!ec) server->acceptor_.bind(stream_protocol::endpoint(path), ec);
  if (!ec) server->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot listen on control socket ", path, ": ", ec.message());
  // Only the daemon's user and the geoloco group may connect (and the peer
  // check below holds even where the mode is looser).
  ::chmod(path.c_str(), 0660);
  if (gid != static_cast<gid_t>(-1) && ::chown(path.c_str(), static_cast<uid_t>(-1), gid) != 0) {
    return GEOLOCO_ERROR(Err::io, "cannot give control socket ", path, " to group ", group_name, ": ",
                         std::strerror(errno));
  }
  asio::co_spawn(executor, server->accept_loop(), asio::detached);
  return server;
}

asio::awaitable<void> ControlServer::accept_loop() {
  return accept_until_closed(acceptor_, open_, accept_errors_,
                             [this](stream_protocol::socket socket) { return serve(std::move(socket)); });
}

asio::awaitable<void> ControlServer::serve(stream_protocol::socket socket) {
  auto send = [&socket](const nlohmann::json& line) -> asio::awaitable<bool> {
    const std::string text = line.dump() + "\n";
    auto [ec, n] = co_await asio::async_write(socket, asio::buffer(text), as_tuple(use_awaitable));
    co_return !ec;
  };
  auto finish = [&](const Status& s) -> asio::awaitable<void> {
    nlohmann::json done{{"done", true}, {"ok", s.ok()}};
    if (!s.ok()) done["error"] = s.message();
    co_await send(done);
  };

  asio::streambuf buffer(kMaxRequestBytes);
  auto [ec, n] = co_await asio::async_read_until(socket, buffer, '\n', as_tuple(use_awaitable));
  if (ec) {
    if (ec == asio::error::not_found) co_await finish(Status(Err::too_large, "request over 8 MiB"));
    co_return;
  }
  // Credentials are checked after the request is read, so a refused client
  // that writes first still reads why it was refused (not a broken pipe).
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) co_return;
  PeerCredentials peer{cred.pid, cred.uid, cred.gid, groups_of(cred.uid, cred.gid)};
  if (const std::string refusal = control_refusal(peer, ::geteuid(), control_gid_); !refusal.empty()) {
    co_await finish(Status(Err::invalid_argument, refusal));
    co_return;
  }
  std::string line(asio::buffers_begin(buffer.data()), asio::buffers_begin(buffer.data()) + static_cast<long>(n));
  auto request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object()) {
    co_await finish(Status(Err::malformed, "the request is not a JSON object"));
    co_return;
  }
  Status s;
  try {
    s = co_await handler_(request, send);
  } catch (const std::exception& e) {
    // A bug, but the client still gets an answer, and the daemon goes on.
    s = Status(Err::internal, cat("the request failed: ", e.what()));
  }
  co_await finish(s);
}

Result<std::string> request_string(const nlohmann::json& request, const char* key, const std::string& fallback) {
  const auto it = request.find(key);
  if (it == request.end()) return fallback;
  GEOLOCO_RETURN_IF(!it->is_string(), Err::invalid_argument, "the request's \"", key, "\" must be a string, not ",
                    it->type_name());
  return it->get<std::string>();
}

Status control_request(const std::string& path, const nlohmann::json& request,
                       const std::function<void(const nlohmann::json&)>& on_line) {
  asio::io_context io;
  stream_protocol::socket socket(io);
  std::error_code ec;
  socket.connect(stream_protocol::endpoint(path), ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot reach geolocod at ", path, ": ", ec.message(),
                    " (is geolocod running? is this the site's control socket? geoloco --socket PATH)");
  const std::string text = request.dump() + "\n";
  asio::write(socket, asio::buffer(text), ec);
  GEOLOCO_RETURN_IF(ec, Err::io, "cannot send to geolocod: ", ec.message());
  asio::streambuf buffer(kMaxRequestBytes);
  std::istream in(&buffer);
  for (;;) {
    asio::read_until(socket, buffer, '\n', ec);
    GEOLOCO_RETURN_IF(ec, Err::io, "geolocod closed the connection: ", ec.message());
    std::string line;
    std::getline(in, line);
    auto reply = nlohmann::json::parse(line, nullptr, false);
    GEOLOCO_RETURN_IF(reply.is_discarded() || !reply.is_object(), Err::malformed, "geolocod sent a malformed reply");
    if (reply.value("done", false)) {
      if (reply.value("ok", false)) return {};
      return Status(Err::invalid_argument, reply.value("error", std::string("failed")));
    }
    on_line(reply);
  }
}

}  // namespace geoloco::control
