// The control socket: only allowed users, one JSON request, streamed reply
// lines, and a final status line the client turns into its Status.
#include <unistd.h>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "daemon/control_socket.h"

using namespace geoloco;
using namespace geoloco::daemon;

TEST_CASE("who may control the daemon") {
  const gid_t geoloco_gid = 990;
  CHECK(control_refusal({1, 0, 0, {}}, 500, geoloco_gid).empty());              // root
  CHECK(control_refusal({1, 500, 500, {}}, 500, geoloco_gid).empty());          // the daemon's user
  CHECK(control_refusal({1, 1000, 990, {}}, 500, geoloco_gid).empty());         // primary group
  CHECK(control_refusal({1, 1000, 1000, {27, 990}}, 500, geoloco_gid).empty()); // supplementary group
  const std::string no = control_refusal({1, 1000, 1000, {27}}, 500, geoloco_gid);
  CHECK(no.find("user 1000 may not control geolocod") == 0);
  CHECK(no.find("join the 'geoloco' group") != std::string::npos);
  CHECK_FALSE(control_refusal({1, 1000, 1000, {}}, 500, static_cast<gid_t>(-1)).empty());  // no such group
}

namespace {
asio::awaitable<Status> count_handler(const nlohmann::json& request, ReplyFn reply) {
  if (request.value("command", std::string()) != "count") co_return Status(Err::invalid_argument, "unknown command");
  const int to = request.value("to", 0);
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
  const std::string path = (std::filesystem::temp_directory_path() / ("geoloco-ctl-" + std::to_string(::getpid()))).string();
  asio::io_context io;
  auto server = ControlServer::open(io.get_executor(), path, "geoloco", count_handler);
  REQUIRE(server.ok());
  std::thread loop([&] { io.run_for(std::chrono::seconds(10)); });
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0660);

  std::vector<int> seen;
  Status s = control_request(path, {{"command", "count"}, {"to", 3}}, [&](const nlohmann::json& l) { seen.push_back(l["n"]); });
  CHECK(s.ok());
  CHECK(seen == std::vector<int>{1, 2, 3});
  Status bad = control_request(path, {{"command", "fly"}}, [](const nlohmann::json&) {});
  CHECK(bad.message() == "unknown command");

  io.stop();
  loop.join();
  (*server)->close();  // after the loop: a posted close could be skipped by stop()
  Status gone = control_request(path, {{"command", "count"}}, [](const nlohmann::json&) {});
  CHECK(gone.code() == Err::io);
  CHECK(gone.message().find("is geolocod running?") != std::string::npos);
}
