// The proxy's control API (docs/faultproxy.md): JSON lines on a loopback TCP
// port, one request per line, one reply per line.
//   {"command":"stats"}                                  counters and faults per link
//   {"command":"set","link":"a-b","both":{"partition":true}}   a change, now
//   {"command":"clear","link":"*"}                       back to the file's faults
//   {"command":"reset","link":"a-b"}                     reset its connections now
#include <yaml-cpp/yaml.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/read_until.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <cmath>

#include "common/yaml_reader.h"
#include "common/accept_loop.h"
#include "faultproxy/proxy.h"

namespace geoloco::faultproxy {

namespace {
constexpr std::size_t kMaxRequestBytes = 64 * 1024;

std::string error_reply(const std::string& why) { return nlohmann::json{{"ok", false}, {"error", why}}.dump(); }
}  // namespace

std::string FaultProxy::handle_request(std::string_view line) {
  auto parsed = yaml::load_text(line, "request");
  if (!parsed.ok()) return error_reply(parsed.status().message());
  const YAML::Node request = *parsed;
  if (!request.IsMap() || !request["command"] || !request["command"].IsScalar())
    return error_reply("expected a JSON object with \"command\": stats, set, clear or reset");
  const auto command = request["command"].as<std::string>();
  if (command == "stats") {
    nlohmann::json reply = stats();
    reply["ok"] = true;
    return reply.dump();
  }
  if (command != "set" && command != "clear" && command != "reset")
    return error_reply(cat("unknown command '", command, "' (expected stats, set, clear or reset)"));
  if (!request["link"] || !request["link"].IsScalar())
    return error_reply(cat(command, ": expected \"link\": one of the links, or \"*\""));
  TimedChange change;
  change.link = request["link"].as<std::string>();
  if (!timeline_.known(change.link)) {
    std::string names;
    for (const auto& n : timeline_.links()) names += (names.empty() ? "" : ", ") + n;
    return error_reply(cat(command, ": no link '", change.link, "' (the links: ", names, ", or *)"));
  }
  yaml::Problems problems("request");
  if (command == "set") {
    change.change = parse_change(request, "", problems, {"command", "link"});
    if (problems.empty() && change.change.edits.empty() && !change.change.clear && !change.change.reset)
      return error_reply("set: changes nothing (name up, down, both, refuse, flap, clear or reset)");
  } else {
    if (request.size() > 2) return error_reply(cat(command, ": takes only \"link\""));
    (command == "clear" ? change.change.clear : change.change.reset) = true;
    change.change.text = command;
  }
  if (!problems.empty()) return error_reply(problems.status().message());
  change.at_s = std::max(now(), std::nextafter(applied_until_, INFINITY));
  const double at = change.at_s;
  timeline_.add(std::move(change));
  apply_events(applied_until_, at);
  event_timer_.cancel();  // the next event may be sooner now
  return nlohmann::json{{"ok", true}, {"t", at}}.dump();
}

asio::awaitable<void> FaultProxy::control_loop() {
  std::atomic<std::uint64_t> errors{0};
  co_await accept_until_closed(*control_, running_, errors,
                               [this](asio::ip::tcp::socket socket) { return control_session(std::move(socket)); });
}

asio::awaitable<void> FaultProxy::control_session(asio::ip::tcp::socket socket) {
  constexpr auto tuple = asio::experimental::as_tuple(asio::use_awaitable);
  std::string buffer;
  while (running_) {
    auto [ec, n] = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer, kMaxRequestBytes), '\n', tuple);
    if (ec) {
      if (ec == asio::error::not_found) {  // a line longer than any request
        const std::string reply =
            error_reply(cat("a request is one line of at most ", kMaxRequestBytes, " bytes")) + "\n";
        co_await asio::async_write(socket, asio::buffer(reply), tuple);
      }
      break;
    }
    std::string line = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string reply = handle_request(line) + "\n";
    auto [wec, unused] = co_await asio::async_write(socket, asio::buffer(reply), tuple);
    if (wec) break;
  }
  std::error_code ignored;
  socket.close(ignored);
}

}  // namespace geoloco::faultproxy
