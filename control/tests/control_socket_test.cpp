// The control socket: only allowed users, one JSON request, streamed reply
// lines, and a final status line the client turns into its Status.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/backoff.h"
#include "control/control_socket.h"

using namespace geoloco;
using namespace geoloco::control;

TEST_CASE("who may control the daemon") {
  const gid_t geoloco_gid = 990;
  CHECK(control_refusal({1, 0, 0, {}}, 500, geoloco_gid).empty());               // root
  CHECK(control_refusal({1, 500, 500, {}}, 500, geoloco_gid).empty());           // the daemon's user
  CHECK(control_refusal({1, 1000, 990, {}}, 500, geoloco_gid).empty());          // primary group
  CHECK(control_refusal({1, 1000, 1000, {27, 990}}, 500, geoloco_gid).empty());  // supplementary group
  const std::string no = control_refusal({1, 1000, 1000, {27}}, 500, geoloco_gid);
  CHECK(no.find("user 1000 may not control geolocod") == 0);
  CHECK(no.find("join the 'geoloco' group") != std::string::npos);
  CHECK_FALSE(control_refusal({1, 1000, 1000, {}}, 500, static_cast<gid_t>(-1)).empty());  // no such group
}

namespace {
asio::awaitable<Status> count_handler(const nlohmann::json& request, ReplyFn reply) {
  auto command = request_string(request, "command");
  if (!command.ok()) co_return command.status();
  if (*command != "count") co_return Status(Err::invalid_argument, "unknown command");
  const int to = request.value("to", 0);  // throws on a string: the server still answers
  for (int i = 1; i <= to; ++i) {
    nlohmann::json line;  // built outside the co_await: GCC 12 cannot keep a braced list alive across it
    line["n"] = i;
    const bool more = co_await reply(line);
    if (!more) break;
  }
  co_return Status();
}
}  // namespace

TEST_CASE("a request gets its streamed lines and a final status") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("geoloco-ctl-" + std::to_string(::getpid()))).string();
  asio::io_context io;
  auto server = ControlServer::open(io.get_executor(), path, "geoloco", count_handler);
  REQUIRE(server.ok());
  std::thread loop([&] { io.run_for(std::chrono::seconds(10)); });
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0660);

  std::vector<int> seen;
  Status s = control_request(path, {{"command", "count"}, {"to", 3}},
                             [&](const nlohmann::json& l) { seen.push_back(l["n"]); });
  CHECK(s.ok());
  CHECK(seen == std::vector<int>{1, 2, 3});
  Status bad = control_request(path, {{"command", "fly"}}, [](const nlohmann::json&) {});
  CHECK(bad.message() == "unknown command");
  // Fields of the wrong type get an answer, never a silently closed connection.
  Status number = control_request(path, {{"command", 42}}, [](const nlohmann::json&) {});
  CHECK(number.message() == "the request's \"command\" must be a string, not number");
  Status thrown = control_request(path, {{"command", "count"}, {"to", "x"}}, [](const nlohmann::json&) {});
  CHECK(thrown.message().find("the request failed: ") == 0);

  io.stop();
  loop.join();
  (*server)->close();  // after the loop: a posted close could be skipped by stop()
  Status gone = control_request(path, {{"command", "count"}}, [](const nlohmann::json&) {});
  CHECK(gone.code() == Err::io);
  CHECK(gone.message().find("is geolocod running?") != std::string::npos);
}

TEST_CASE("out of descriptors, the accept loop backs off instead of spinning, and serves again afterwards") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("geoloco-ctl-emfile-" + std::to_string(::getpid()))).string();
  asio::io_context io;
  auto server = ControlServer::open(io.get_executor(), path, "geoloco", count_handler);
  REQUIRE(server.ok());
  auto work = asio::make_work_guard(io);
  std::thread loop([&] { io.run_for(std::chrono::seconds(20)); });
  // Every descriptor taken but one, which a client takes to connect: it
  // waits in the listen backlog, and the server's accept() fails with EMFILE.
  rlimit old{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &old) == 0);
  rlimit low = old;
  low.rlim_cur = 256;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> filler;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) filler.push_back(fd);
  REQUIRE(!filler.empty());
  ::close(filler.back());
  filler.pop_back();
  const std::uint64_t before = (*server)->accept_errors();
  int waiting = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(waiting >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(::connect(waiting, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  // Waited for three failed accepts, not slept on: a loaded machine only
  // makes them later. The backoff (25, 50, 100 ms, ...) puts at least 75 ms
  // between the first and the third; a loop that spun would fail thousands
  // of times in that while.
  std::uint64_t failed = 0;
  while ((failed = (*server)->accept_errors() - before) < 3 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  for (int fd : filler) ::close(fd);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &old) == 0);
  REQUIRE(failed >= 3);
  CHECK(elapsed >= std::chrono::milliseconds(75));
  // No more failures than the backoff allows in the time measured (a timer
  // never fires early): late polls only let the count grow by the schedule.
  std::uint64_t allowed = 1;
  for (auto waited = accept_backoff(1); waited <= elapsed; waited += accept_backoff(static_cast<unsigned>(allowed)))
    ++allowed;
  CHECK(failed <= allowed);
  // With descriptors back, the waiting client is served.
  const std::string request = "{\"command\":\"count\",\"to\":1}\n";
  REQUIRE(::write(waiting, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[256];
  for (ssize_t n; reply.find("\"done\"") == std::string::npos && (n = ::read(waiting, buf, sizeof buf)) > 0;)
    reply.append(buf, static_cast<std::size_t>(n));
  CHECK(reply.find("{\"n\":1}") != std::string::npos);
  CHECK(reply.find("\"ok\":true") != std::string::npos);
  ::close(waiting);
  work.reset();
  io.stop();
  loop.join();
  (*server)->close();
}
