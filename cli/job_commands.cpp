// `geoloco submit job.yaml`, `status [JOB] [--json]`, `watch JOB`,
// `cancel JOB`: the operator's commands that talk to the local geolocod over
// its control socket (control/control_socket.h, one JSON request, JSON reply
// lines, a final {"done": true, ...}). This file only sends requests and
// prints; every line it prints is built by job_output.h, tested without a
// daemon. Exit codes: job_output.h's JobExit.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/job_output.h"
#include "control/control_socket.h"

namespace geoloco::cli {

namespace {
using nlohmann::json;

struct JobArgs {
  std::string socket;
  std::string file;
  std::string job;
  bool json = false;
};

void exit_on_interrupt(int) { ::_exit(kExitInterrupted); }

// Ctrl-C ends a blocking request at once as a plain exit 130 (128 + SIGINT,
// what a shell shows for it); watch flushed every line it printed.
void exit_130_on_ctrl_c() { std::signal(SIGINT, exit_on_interrupt); }

// asio's endpoint throws on a path sun_path cannot hold: refuse it as usage.
bool usable_socket_path(const std::string& command, const std::string& path) {
  constexpr std::size_t max_path = sizeof(sockaddr_un::sun_path) - 1;
  if (path.empty()) {
    std::cerr << "geoloco " << command << ": --socket: empty path\n";
    return false;
  }
  if (path.size() > max_path) {
    std::cerr << "geoloco " << command << ": --socket " << path << ": " << path.size()
              << " bytes, a Unix socket path holds at most " << max_path << "\n";
    return false;
  }
  return true;
}

// Why the daemon cannot be reached, as the kernel says it: connect()'s errno
// (ENOENT: no socket; ECONNREFUSED: a stale one; EACCES: not our group), or
// 0 when a connection works now. Asked only after a request failed, so the
// hint follows from the real cause, not from parsing a message.
int connect_errno(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), std::min(path.size(), sizeof(address.sun_path) - 1));
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

// Whether this process's user may use the socket at `path`, judged from the
// file's owner and group as the daemon judges (job_output.h socket_admits);
// true when the file cannot be examined: then nothing is inferred.
bool admitted(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return true;
  std::vector<gid_t> groups(static_cast<std::size_t>(std::max(::getgroups(0, nullptr), 0)));
  const int n = ::getgroups(static_cast<int>(groups.size()), groups.data());
  groups.resize(static_cast<std::size_t>(std::max(n, 0)));
  return socket_admits(::geteuid(), ::getegid(), groups, st.st_uid, st.st_gid);
}

// control::control_request() reports the daemon's own refusal (a final line with
// "ok": false) as invalid_argument; every other code is the socket's.
bool daemon_refused(const Status& s) { return s.code() == Err::invalid_argument; }

// A failed request, on stderr: the daemon's refusal (exit 1; `as_is`: its
// text alone, for submit's file:line:column list), or why the daemon is out
// of reach (exit 3). A user the socket's owner and group do not admit also
// gets the group hint: the daemon refuses such a user before reading the
// request and hangs up, and the refusal line may be lost when our request
// is still being written (EPIPE), so that case counts as a refusal too.
int report_failure(const std::string& command, const std::string& path, const Status& s, bool as_is = false) {
  const bool admits = admitted(path);
  if (daemon_refused(s)) {
    if (!as_is) std::cerr << "geoloco " << command << ": ";
    std::cerr << s.message();
    if (s.message().empty() || s.message().back() != '\n') std::cerr << '\n';
    if (!admits) std::cerr << join_group_hint() << '\n';
    return kExitRefused;
  }
  const int err = connect_errno(path);
  if (err == 0 && !admits) {
    for (const auto& line : hung_up_lines(command, path, s.message())) std::cerr << line << '\n';
    return kExitRefused;
  }
  for (const auto& line : unreachable_lines(command, path, err, s.message())) std::cerr << line << '\n';
  return kExitUnreachable;
}

// After the daemon refused a request about `job`: if it does not know the
// job, say so and where the list is. Asks for the job list; says nothing
// when that is refused too (the refusal already said why), nor asks when
// this user is not admitted (the refusal was about the user, not the job).
void explain_if_missing(const std::string& path, const std::string& job) {
  if (!admitted(path)) return;
  json reply;
  bool got = false;
  json request;
  request["command"] = "status";
  const Status s = control::control_request(path, request, [&](const json& line) {
    if (line.contains("jobs")) {
      reply = line;
      got = true;
    }
  });
  if (s.ok() && got && !status_has_job(reply, job)) std::cerr << "  " << missing_job_line(reply, job) << '\n';
}

int run_submit(const JobArgs& a) {
  const std::string command = "submit";
  std::ifstream in(a.file, std::ios::binary);
  if (!in) {
    std::cerr << "geoloco submit: cannot read " << a.file << ": " << std::strerror(errno) << '\n';
    return kExitUsage;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  json request;
  request["command"] = "submit";
  request["file"] = a.file;
  request["yaml"] = buffer.str();  // the exact bytes: the daemon reports file:line:column in them
  try {
    (void)request.dump();  // JSON strings are UTF-8: refuse other bytes here, not by a throw mid-send
  } catch (const json::type_error& e) {
    std::cerr << "geoloco submit: " << a.file << " is not UTF-8 text (" << e.what() << ")\n";
    return kExitUsage;
  }
  json reply;
  const Status s = control::control_request(a.socket, request, [&](const json& line) {
    if (line.contains("job")) reply = line;
  });
  // A validation failure arrives as the refusal: every problem as
  // "file:line:column: ...", printed as is.
  if (!s.ok()) return report_failure(command, a.socket, s, /*as_is=*/true);
  for (const auto& line : submit_lines(reply)) std::cout << line << '\n';
  return kExitOk;
}

int run_status(const JobArgs& a) {
  const std::string command = "status";
  json request;
  request["command"] = "status";
  if (!a.job.empty()) request["job"] = a.job;
  json reply;
  bool got = false;
  const Status s = control::control_request(a.socket, request, [&](const json& line) {
    if (line.contains("jobs")) {
      reply = line;
      got = true;
    }
  });
  if (!s.ok()) {
    const int rc = report_failure(command, a.socket, s);
    if (daemon_refused(s) && !a.job.empty()) explain_if_missing(a.socket, a.job);
    return rc;
  }
  if (!got) {
    std::cerr << "geoloco status: geolocod answered without a job list (a daemon bug: please report it)\n";
    return kExitRefused;
  }
  if (!a.job.empty() && !status_has_job(reply, a.job)) {
    std::cerr << "geoloco status: " << missing_job_line(reply, a.job) << '\n';
    return kExitRefused;
  }
  if (a.json) {
    std::cout << reply.dump(2) << '\n';
  } else {
    for (const auto& line : status_lines(reply, a.job)) std::cout << line << '\n';
  }
  return kExitOk;
}

int run_watch(const JobArgs& a) {
  const std::string command = "watch";
  json request;
  request["command"] = "watch";
  request["job"] = a.job;
  bool header_printed = false;
  bool saw_job = false;
  std::string last_state;
  const Status s = control::control_request(a.socket, request, [&](const json& line) {
    // Flushed line by line: watch is read live, often through a pipe.
    if (const auto round = line.find("round"); round != line.end() && round->is_object()) {
      saw_job = true;
      if (!header_printed) std::cout << watch_header() << '\n';
      header_printed = true;
      std::cout << watch_round_line(*round) << std::endl;
    } else if (line.contains("event")) {
      saw_job = true;
      if (const auto state = line.find("state"); state != line.end() && state->is_string())
        last_state = state->get<std::string>();
      std::cout << watch_event_line(line) << std::endl;
    }
  });
  if (!s.ok()) {
    const int rc = report_failure(command, a.socket, s);
    if (daemon_refused(s) && !saw_job) explain_if_missing(a.socket, a.job);  // saw it: it exists (and failed)
    return rc;
  }
  return last_state == "failed" || last_state == "cancelled" ? kExitRefused : kExitOk;
}

int run_cancel(const JobArgs& a) {
  const std::string command = "cancel";
  json request;
  request["command"] = "cancel";
  request["job"] = a.job;
  std::string message;
  const Status s = control::control_request(a.socket, request, [&](const json& line) {
    if (const auto m = line.find("message"); m != line.end() && m->is_string()) message = m->get<std::string>();
  });
  if (!s.ok()) {
    const int rc = report_failure(command, a.socket, s);
    if (daemon_refused(s)) explain_if_missing(a.socket, a.job);
    return rc;
  }
  std::cout << a.job << ": " << (message.empty() ? std::string("cancel requested") : message) << '\n';
  return kExitOk;
}

// Every job command: --socket, then run `body` once the path is usable.
CLI::App* job_subcommand(CLI::App& app, Action& action, const std::shared_ptr<JobArgs>& args, const char* name,
                         const char* help, int (*body)(const JobArgs&)) {
  auto* sub = app.add_subcommand(name, help);
  sub->add_option("--socket", args->socket,
                  "geolocod's control socket (default: $GEOLOCO_CONTROL_SOCKET, else /run/geoloco/geolocod.sock)")
      ->capture_default_str();
  sub->callback([&action, args, name, body] {
    action = [args, name, body] {
      if (!usable_socket_path(name, args->socket)) return static_cast<int>(kExitUsage);
      exit_130_on_ctrl_c();
      return body(*args);
    };
  });
  return sub;
}
}  // namespace

void add_job_commands(CLI::App& app, Action& action) {
  auto args = std::make_shared<JobArgs>();
  args->socket = default_socket_path(std::getenv("GEOLOCO_CONTROL_SOCKET"));

  auto* submit = job_subcommand(app, action, args, "submit", "Submit a job file to the local geolocod", run_submit);
  submit->add_option("job_file", args->file, "the job's YAML file")->required();

  auto* status = job_subcommand(app, action, args, "status", "Show this site's jobs, or one job", run_status);
  status->add_option("job", args->job, "only this job");
  status->add_flag("--json", args->json, "print the daemon's reply as JSON, for scripts");

  auto* watch =
      job_subcommand(app, action, args, "watch",
                     "Follow a job: one line per committed round until it ends (exit 0: finished)", run_watch);
  watch->add_option("job", args->job, "the job's name")->required();

  auto* cancel = job_subcommand(app, action, args, "cancel", "Cancel a job", run_cancel);
  cancel->add_option("job", args->job, "the job's name")->required();
}

}  // namespace geoloco::cli
