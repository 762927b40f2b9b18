// The real `geoloco` binary against a fake geolocod: a real control::ControlServer
// (control/control_socket.h) whose handler records each request and answers
// from a script, per the control protocol in cli/README.md. Checks the bytes
// sent, stdout, stderr and exit codes. Every child runs under a deadline and
// is killed past it; the fake daemon's loop stops on its own too.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "cli/tests/job_fixtures.h"
#include "control/control_socket.h"

using namespace geoloco;
namespace fixtures = geoloco::cli::fixtures;
using nlohmann::json;

extern char** environ;

namespace {

std::string temp_path(const std::string& what) {
  static std::atomic<int> counter{0};
  return (std::filesystem::temp_directory_path() /
          ("geoloco-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + what))
      .string();
}

// What the fake daemon answers to one request.
struct Reply {
  std::vector<json> lines;
  std::string error;  ///< empty: ok
  bool hang = false;  ///< keep the connection open after the lines (a live watch)
};

class FakeDaemon {
 public:
  explicit FakeDaemon(std::function<Reply(const json&)> script) : script_(std::move(script)), path_(temp_path("sock")) {
    auto server = control::ControlServer::open(
        io_.get_executor(), path_, "geoloco",
        [this](const json& request, control::ReplyFn reply) { return answer(this, request, std::move(reply)); });
    REQUIRE(server.ok());
    server_ = std::move(*server);
    thread_ = std::thread([this] { io_.run_for(std::chrono::seconds(60)); });
  }
  ~FakeDaemon() {
    io_.stop();
    thread_.join();
    server_->close();  // after the loop, as daemon/tests/control_socket_test.cpp does
  }
  const std::string& path() const { return path_; }
  std::vector<json> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  static asio::awaitable<Status> answer(FakeDaemon* self, json request, control::ReplyFn reply) {
    Reply r;
    {
      std::lock_guard lock(self->mu_);
      self->requests_.push_back(request);
      r = self->script_(request);
    }
    for (const json& line : r.lines)
      if (!co_await reply(line)) co_return Status();
    if (r.hang) {
      asio::steady_timer timer(co_await asio::this_coro::executor);
      timer.expires_after(std::chrono::seconds(30));
      co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    }
    if (r.error.empty()) co_return Status();
    co_return Status(Err::invalid_argument, r.error);
  }

  asio::io_context io_;
  std::function<Reply(const json&)> script_;
  std::string path_;
  std::unique_ptr<control::ControlServer> server_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<json> requests_;
};

struct Run {
  int exit_code = -1;  ///< -1: killed at the deadline
  std::string out;
  std::string err;
};

struct RunOptions {
  std::vector<std::string> env;  ///< NAME=value added to the environment
  std::string interrupt_after;   ///< send SIGINT once stdout holds this
  bool as_nobody = false;        ///< run as uid/gid 65534 (needs root)
  int deadline_s = 20;
};

// The geoloco binary where another user can run it: the build tree may lie
// in a folder only its owner enters (a clone in /root), so nobody gets a copy
// in the temporary folder.
std::string binary_for_nobody() {
  static const std::string copy = [] {
    const std::string dir = temp_path("bin");
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms(0755));
    const std::string path = dir + "/geoloco";
    std::filesystem::copy_file(GEOLOCO_CLI_BINARY, path, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::permissions(path, std::filesystem::perms(0755));
    return path;
  }();
  return copy;
}

// Runs the geoloco binary; GEOLOCO_CONTROL_SOCKET is removed from the
// environment unless options.env sets it.
Run run_geoloco(const std::vector<std::string>& args, const RunOptions& options = {}) {
  std::vector<std::string> argv_text{options.as_nobody ? binary_for_nobody() : std::string(GEOLOCO_CLI_BINARY)};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "GEOLOCO_CONTROL_SOCKET=", 23) != 0) env_text.emplace_back(*e);
  env_text.insert(env_text.end(), options.env.begin(), options.env.end());
  std::vector<char*> argv, envp;
  for (auto& a : argv_text) argv.push_back(a.data());
  for (auto& e : env_text) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    if (options.as_nobody && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(99);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(98);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  Run run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options.deadline_s);
  bool interrupted = false, killed = false;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        sinks[i]->append(buffer, static_cast<std::size_t>(n));
      }
    }
    if (!options.interrupt_after.empty() && !interrupted &&
        run.out.find(options.interrupt_after) != std::string::npos) {
      ::kill(pid, SIGINT);
      interrupted = true;
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!killed && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (killed) FAIL("geoloco " << args.front() << " ran past " << options.deadline_s << " s; stdout: " << run.out);
  return run;
}

// A job file in the temp folder, removed at the end of the test.
struct TempFile {
  explicit TempFile(const std::string& bytes) : path(temp_path("job.yaml")) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { std::filesystem::remove(path); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string path;
};

json request(std::initializer_list<std::pair<const std::string, json>> fields) {
  json j = json::object();
  for (const auto& [k, v] : fields) j[k] = v;
  return j;
}

// A daemon that knows the fixtures: status of all jobs, and `error` for
// everything else (so a test sees which requests the CLI sent).
Reply fixture_status_or(const json& r, const std::string& error) {
  if (r.value("command", "") == "status" && !r.contains("job")) return {{fixtures::status_reply()}, "", false};
  return {{}, error, false};
}

const std::string kHintRunning =
    "  is geolocod running? `systemctl status geolocod`\n"
    "  another site's daemon: --socket PATH (or GEOLOCO_CONTROL_SOCKET=PATH)\n";
const std::string kJoinGroupHint =
    "  add your user to the geoloco group (sudo adduser $USER geoloco) and log in again\n";

}  // namespace

TEST_CASE("submit sends the file's exact text and prints the daemon's summary") {
  FakeDaemon d([](const json&) {
    return Reply{{json::parse(R"({"job": "gpt-demo", "coordinator": "a", "sites": ["a", "b", "c"],
                                  "message": "accepted; round 1 starts when b and c join"})")},
                 "",
                 false};
  });
  // Tabs, CRLF, quotes, backslashes, UTF-8 and no final newline: all must arrive byte for byte.
  const std::string text = "name: gpt-demo\r\nsites: [a, b, c]\t# \"three\" \\ sites\ncoordinator: a\n# caf\xc3\xa9";
  const TempFile job(text);
  const std::string& file = job.path;
  Run r = run_geoloco({"submit", file, "--socket", d.path()});
  CHECK(r.exit_code == 0);
  CHECK(r.err == "");
  CHECK(r.out ==
        "submitted job gpt-demo: coordinator a, sites a, b, c\n"
        "accepted; round 1 starts when b and c join\n"
        "follow it with: geoloco watch gpt-demo\n");
  const auto requests = d.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0] == request({{"command", "submit"}, {"file", file}, {"yaml", text}}));
  CHECK(requests[0]["yaml"].get<std::string>() == text);
}

TEST_CASE("a refused submit prints the daemon's error as is and exits 1") {
  const std::string error =
      "job.yaml:4:7: outer.lr: expected a number, got 'fast'\n"
      "job.yaml:9:1: unknown key 'stopp' (allowed: name, sites, ...)";
  FakeDaemon d([&](const json&) { return Reply{{}, error, false}; });
  const TempFile job("name: x\n");
  Run r = run_geoloco({"submit", job.path, "--socket", d.path()});
  CHECK(r.exit_code == 1);
  CHECK(r.out == "");
  CHECK(r.err == error + "\n");
}

TEST_CASE("submit of an unreadable or non-UTF-8 file is a usage error and sends nothing") {
  FakeDaemon d([](const json&) { return Reply{}; });
  const std::string missing = temp_path("missing.yaml");
  Run r = run_geoloco({"submit", missing, "--socket", d.path()});
  CHECK(r.exit_code == 2);
  CHECK(r.err == "geoloco submit: cannot read " + missing + ": " + std::strerror(ENOENT) + "\n");
  const TempFile latin1_job("name: caf\xe9\n");
  const std::string& latin1 = latin1_job.path;
  r = run_geoloco({"submit", latin1, "--socket", d.path()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.rfind("geoloco submit: " + latin1 + " is not UTF-8 text (", 0) == 0);
  CHECK(d.requests().empty());
}

TEST_CASE("status prints the table, --json the reply, and asks for one job") {
  FakeDaemon d([](const json&) { return Reply{{fixtures::status_reply()}, "", false}; });
  Run r = run_geoloco({"status", "--socket", d.path()});
  CHECK(r.exit_code == 0);
  CHECK(r.err == "");
  CHECK(r.out == fixtures::status_text());

  r = run_geoloco({"status", "--json", "--socket", d.path()});
  CHECK(r.exit_code == 0);
  CHECK(r.out == fixtures::status_reply().dump(2) + "\n");  // pretty, and the reply unchanged
  CHECK(json::parse(r.out) == fixtures::status_reply());

  r = run_geoloco({"status", "gpt-demo", "--socket", d.path()});
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("gpt-demo: running, round 12/100 (coordinator a)\n", 0) == 0);
  CHECK(r.out.find("mlp-test") == std::string::npos);

  const auto requests = d.requests();
  REQUIRE(requests.size() == 3);
  CHECK(requests[0] == request({{"command", "status"}}));
  CHECK(requests[1] == request({{"command", "status"}}));
  CHECK(requests[2] == request({{"command", "status"}, {"job", "gpt-demo"}}));
}

TEST_CASE("a job the daemon does not know: its error, then where the jobs are listed") {
  FakeDaemon d([](const json& r) { return fixture_status_or(r, "no job '" + r.value("job", "") + "'"); });
  const std::string hint =
      "  no job 'nope' on site b (jobs there: gpt-demo, mlp-test); `geoloco status` lists the jobs\n";
  for (const char* command : {"status", "watch", "cancel"}) {
    Run r = run_geoloco({command, "nope", "--socket", d.path()});
    INFO(command);
    CHECK(r.exit_code == 1);
    CHECK(r.out == "");
    CHECK(r.err == std::string("geoloco ") + command + ": no job 'nope'\n" + hint);
  }
  // A reply without the job (rather than a refusal) says the same.
  FakeDaemon lenient([](const json&) { return Reply{{fixtures::status_reply()}, "", false}; });
  Run r = run_geoloco({"status", "nope", "--socket", lenient.path()});
  CHECK(r.exit_code == 1);
  CHECK(r.err == "geoloco status: " + hint.substr(2));
}

TEST_CASE("watch prints the header and a line per round, exits 0 when the job finished") {
  FakeDaemon d([](const json&) { return Reply{fixtures::watch_stream(), "", false}; });
  Run r = run_geoloco({"watch", "gpt-demo", "--socket", d.path()});
  CHECK(r.exit_code == 0);
  CHECK(r.err == "");
  CHECK(r.out == fixtures::watch_text());
  const auto requests = d.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0] == request({{"command", "watch"}, {"job", "gpt-demo"}}));
}

TEST_CASE("watch exits 1 when the job failed or was cancelled") {
  auto stream = fixtures::watch_stream();
  stream.resize(2);  // the running event and round 1
  stream.push_back(json::parse(R"({"event": "site b: trainer exited with status 1", "state": "failed"})"));
  FakeDaemon d([&](const json&) {
    return Reply{stream, "job gpt-demo failed: site b: trainer exited with status 1", false};
  });
  Run r = run_geoloco({"watch", "gpt-demo", "--socket", d.path()});
  CHECK(r.exit_code == 1);
  CHECK(r.out ==
        "# job gpt-demo running on a, b, c\n"
        "round  sites      loss      eval        sent    ratio   compute   waiting  exchange    busy  lagging\n"
        "    1    3/3    3.2188         -     1.5 MiB    24.1x      30.0       0.3       1.5   99.5%  -\n"
        "# site b: trainer exited with status 1\n");
  CHECK(r.err == "geoloco watch: job gpt-demo failed: site b: trainer exited with status 1\n");
  CHECK(d.requests().size() == 1);  // the job exists: no job list asked for

  // A daemon that ends a cancelled job's stream with ok still exits 1.
  FakeDaemon lax([](const json&) {
    return Reply{{json::parse(R"({"event": "cancelled by root", "state": "cancelled"})")}, "", false};
  });
  r = run_geoloco({"watch", "gpt-demo", "--socket", lax.path()});
  CHECK(r.exit_code == 1);
  CHECK(r.out == "# cancelled by root\n");
}

TEST_CASE("Ctrl-C stops watch with 130 after the lines already printed") {
  auto stream = fixtures::watch_stream();
  stream.resize(2);
  FakeDaemon d([&](const json&) { return Reply{stream, "", true}; });
  RunOptions o;
  o.interrupt_after = "    1    3/3";
  Run r = run_geoloco({"watch", "gpt-demo", "--socket", d.path()}, o);
  CHECK(r.exit_code == 130);
  CHECK(r.out ==
        "# job gpt-demo running on a, b, c\n"
        "round  sites      loss      eval        sent    ratio   compute   waiting  exchange    busy  lagging\n"
        "    1    3/3    3.2188         -     1.5 MiB    24.1x      30.0       0.3       1.5   99.5%  -\n");
}

TEST_CASE("cancel prints the daemon's message") {
  FakeDaemon d([](const json&) {
    return Reply{{json::parse(R"({"job": "gpt-demo", "message": "cancelling on a, b, c"})")}, "", false};
  });
  Run r = run_geoloco({"cancel", "gpt-demo", "--socket", d.path()});
  CHECK(r.exit_code == 0);
  CHECK(r.err == "");
  CHECK(r.out == "gpt-demo: cancelling on a, b, c\n");
  const auto requests = d.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0] == request({{"command", "cancel"}, {"job", "gpt-demo"}}));
}

TEST_CASE("no daemon at the path: exit 3, the path and what to do") {
  const std::string missing = temp_path("nobody-home.sock");
  const TempFile job("name: x\n");
  const std::string& file = job.path;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"submit", file}, {"status"}, {"status", "--json"}, {"watch", "x"}, {"cancel", "x"}}) {
    auto with_socket = args;
    with_socket.insert(with_socket.end(), {"--socket", missing});
    Run r = run_geoloco(with_socket);
    INFO(args.front());
    CHECK(r.exit_code == 3);
    CHECK(r.out == "");
    CHECK(r.err == "geoloco " + args.front() + ": cannot reach geolocod at " + missing + ": " + std::strerror(ENOENT) +
                       "\n" + kHintRunning);
  }

  // A stale socket file (a daemon that died without removing it).
  const std::string stale = temp_path("stale.sock");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, stale.c_str(), sizeof(address.sun_path) - 1);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  ::close(fd);
  Run r = run_geoloco({"status", "--socket", stale});
  CHECK(r.exit_code == 3);
  CHECK(r.err ==
        "geoloco status: cannot reach geolocod at " + stale + ": " + std::strerror(ECONNREFUSED) + "\n" + kHintRunning);
  std::filesystem::remove(stale);
}

TEST_CASE("the socket is --socket, else $GEOLOCO_CONTROL_SOCKET, else /run/geoloco/geolocod.sock") {
  FakeDaemon d([](const json&) { return Reply{{fixtures::status_reply()}, "", false}; });
  RunOptions env;
  env.env = {"GEOLOCO_CONTROL_SOCKET=" + d.path()};
  Run r = run_geoloco({"status"}, env);
  CHECK(r.exit_code == 0);
  CHECK(r.out == fixtures::status_text());

  RunOptions wrong_env;
  wrong_env.env = {"GEOLOCO_CONTROL_SOCKET=" + temp_path("elsewhere.sock")};
  r = run_geoloco({"status", "--socket", d.path()}, wrong_env);
  CHECK(r.exit_code == 0);
  CHECK(d.requests().size() == 2);

  r = run_geoloco({"status", "--help"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("/run/geoloco/geolocod.sock") != std::string::npos);
}

TEST_CASE("a user outside the geoloco group is told to join it") {
  FakeDaemon d([](const json&) { return Reply{{fixtures::status_reply()}, "", false}; });
  RunOptions o;
  if (::geteuid() == 0) {
    o.as_nobody = true;  // root passes any mode: run the CLI as nobody, outside the socket's group
  } else {
    REQUIRE(::chmod(d.path().c_str(), 0) == 0);
  }
  Run r = run_geoloco({"status", "--socket", d.path()}, o);
  CHECK(r.exit_code == 3);
  CHECK(r.err ==
        "geoloco status: cannot reach geolocod at " + d.path() + ": " + std::strerror(EACCES) + "\n" + kJoinGroupHint);
  CHECK(d.requests().empty());

  // With the socket's mode opened up, the daemon's own check (SO_PEERCRED)
  // refuses: exit 1 and the same hint. Its reason line comes first when it
  // arrives; the daemon hangs up before reading the request, so the client's
  // write can fail first (EPIPE) and lose it: the hint holds either way.
  if (::geteuid() == 0) {
    REQUIRE(::chmod(d.path().c_str(), 0666) == 0);
    for (int attempt = 0; attempt < 5; ++attempt) {  // both orders of that race, most likely
      r = run_geoloco({"status", "--socket", d.path()}, o);
      INFO("stderr: " << r.err);
      CHECK(r.exit_code == 1);
      const bool daemon_reason = r.err.rfind("geoloco status: user 65534 may not control geolocod", 0) == 0;
      const bool hung_up =
          r.err.rfind("geoloco status: geolocod at " + d.path() + " closed the connection without an answer: ", 0) == 0;
      CHECK((daemon_reason || hung_up));
      CHECK(r.err.size() > kJoinGroupHint.size());
      CHECK(r.err.substr(r.err.size() - kJoinGroupHint.size()) == kJoinGroupHint);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 2);
    }
    CHECK(d.requests().empty());
  } else {
    WARN("SKIPPED: not root: the daemon's SO_PEERCRED refusal needs a second user, not checked");
  }
}

TEST_CASE("usage errors exit 2") {
  CHECK(run_geoloco({"watch"}).exit_code == 2);
  CHECK(run_geoloco({"submit"}).exit_code == 2);
  CHECK(run_geoloco({"status", "a", "b"}).exit_code == 2);
  Run r = run_geoloco({"status", "--socket", ""});
  CHECK(r.exit_code == 2);
  CHECK(r.err == "geoloco status: --socket: empty path\n");
  const std::string long_path = "/tmp/" + std::string(120, 's');
  r = run_geoloco({"cancel", "x", "--socket", long_path});
  CHECK(r.exit_code == 2);
  CHECK(r.err == "geoloco cancel: --socket " + long_path + ": 125 bytes, a Unix socket path holds at most 107\n");
}
