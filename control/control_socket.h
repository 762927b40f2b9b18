// The local control socket, both sides (`geoloco submit/status/watch/cancel`
// talk to the daemon here, docs/design.md §3): a Unix stream socket, mode 0660, group
// `geoloco`. Only root, the daemon's own user, or members of the geoloco
// group may use it; the kernel's peer credentials (SO_PEERCRED) say who
// connected. Requests and replies are JSON objects, one per line; a reply
// stream ends with a line holding "done": true.
#pragma once

#include <sys/types.h>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/local/stream_protocol.hpp>
#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::control {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  ///< supplementary groups of the peer's user
};

/// Who may control the daemon: root, the daemon's own user, or a member
/// of `control_gid` (the geoloco group; -1 when the group does not exist).
/// Returns the reason for a refusal, or "" when allowed.
std::string control_refusal(const PeerCredentials& peer, uid_t daemon_uid, gid_t control_gid);

/// The string field `key` of a request, `fallback` when it is absent.
/// Errors: invalid_argument naming the field when it is there but not a string.
Result<std::string> request_string(const nlohmann::json& request, const char* key, const std::string& fallback = {});

/// Sends one reply line; returns false once the client is gone.
using ReplyFn = std::function<asio::awaitable<bool>(const nlohmann::json& line)>;
/// Answers one request: writes zero or more lines through `reply`; the
/// server then adds the final {"done": true, "ok": ..., "error": ...} line.
using RequestHandler = std::function<asio::awaitable<Status>(const nlohmann::json& request, ReplyFn reply)>;

class ControlServer {
 public:
  /// Binds `path` (replacing a stale socket file), mode 0660, group
  /// `group_name` when that group exists. Errors: io.
  static Result<std::unique_ptr<ControlServer>> open(asio::any_io_executor executor, const std::string& path,
                                                     const std::string& group_name, RequestHandler handler);
  ~ControlServer();
  void close();
  const std::string& path() const { return path_; }
  /// accept() failures so far (EMFILE, ENOMEM: each retried after accept_backoff()).
  std::uint64_t accept_errors() const { return accept_errors_; }

 private:
  ControlServer(asio::any_io_executor executor, std::string path, gid_t gid, RequestHandler handler);
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve(asio::local::stream_protocol::socket socket);

  asio::local::stream_protocol::acceptor acceptor_;
  std::string path_;
  gid_t control_gid_;
  RequestHandler handler_;
  bool open_ = true;
  std::atomic<std::uint64_t> accept_errors_{0};
};

/// Client side: sends `request` and calls `on_line` for each reply line
/// until the final one, whose status it returns. Blocking (for the CLI).
/// Errors: io ("is geolocod running?"), and the daemon's own error.
Status control_request(const std::string& path, const nlohmann::json& request,
                       const std::function<void(const nlohmann::json&)>& on_line);

}  // namespace geoloco::control
