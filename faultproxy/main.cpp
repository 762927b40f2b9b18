// geoloco-faultproxy: a TCP proxy that gives links between sites a wide-area
// network's delay, bandwidth and failures, on a schedule or on request
// (docs/faultproxy.md).
//
//   geoloco-faultproxy --config proxy.yaml [--stats FILE] [--for 5m]
//   geoloco-faultproxy call 127.0.0.1:7700 '{"command":"stats"}'
#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "common/yaml_reader.h"
#include "faultproxy/config.h"
#include "faultproxy/proxy.h"

namespace {

using namespace geoloco;

// Writes the counters where a test reads them after the proxy stopped: a
// new file renamed over the old, so a reader never sees half of one.
bool write_stats(const std::string& path, const nlohmann::json& stats) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << stats.dump(2) << "\n";
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

int run_proxy(const std::string& config_path, const std::string& stats_path, const std::string& for_text) {
  double for_s = 0;
  if (!for_text.empty()) {
    yaml::Problems p("--for");
    if (!yaml::read_duration(YAML::Node(for_text), "--for", for_s, p)) {
      std::cerr << "geoloco-faultproxy: " << p.status().message() << "\n";
      return 2;
    }
  }
  auto config = faultproxy::load_config(config_path);
  if (!config.ok()) {
    std::cerr << "geoloco-faultproxy: " << config.status().message() << "\n";
    return 2;
  }
  asio::io_context io;
  faultproxy::FaultProxy proxy(io.get_executor(), *config, [](const std::string& line) {
    std::cerr << "geoloco-faultproxy: " << line << std::endl;
  });
  if (auto st = proxy.start(); !st.ok()) {
    std::cerr << "geoloco-faultproxy: " << st.message() << "\n";
    return 1;
  }
  for (const auto& link : config->links)
    std::cerr << "geoloco-faultproxy: link " << link.name << " " << link.listen.host << ":"
              << proxy.listen_port(link.name) << " -> " << link.connect.host << ":" << link.connect.port << " ("
              << faultproxy::describe(link.faults) << ")\n";
  if (config->control)
    std::cerr << "geoloco-faultproxy: control " << config->control->host << ":" << proxy.control_port() << "\n";
  std::cerr << "geoloco-faultproxy: " << config->schedule.size() << " scheduled change(s)" << std::endl;

  auto shut = [&] {
    proxy.stop();
    io.stop();
  };
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const std::error_code& ec, int) {
    if (!ec) shut();
  });
  asio::steady_timer limit(io);
  if (for_s > 0) {
    limit.expires_after(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(for_s)));
    limit.async_wait([&](const std::error_code& ec) {
      if (!ec) shut();
    });
  }
  io.run();
  const nlohmann::json stats = proxy.stats();
  if (!stats_path.empty() && !write_stats(stats_path, stats)) {
    std::cerr << "geoloco-faultproxy: cannot write " << stats_path << "\n";
    return 1;
  }
  for (const auto& [name, s] : stats["links"].items())
    std::cerr << "geoloco-faultproxy: " << name << ": " << s["accepted"] << " connection(s), up " << s["up"]["written"]
              << " bytes, down " << s["down"]["written"] << " bytes, " << s["resets"] << " reset(s), " << s["cuts"]
              << " cut(s), " << s["refused"] << " refused\n";
  return 0;
}

int call(const std::string& address, const std::string& request) {
  auto at = parse_host_port(address);
  if (!at.ok()) {
    std::cerr << "geoloco-faultproxy call: " << at.status().message() << "\n";
    return 2;
  }
  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    asio::ip::tcp::socket socket(io);
    asio::connect(socket, resolver.resolve(at->host, std::to_string(at->port)));
    std::string line = request;
    while (!line.empty() && line.back() == '\n') line.pop_back();
    line += "\n";
    asio::write(socket, asio::buffer(line));
    std::string reply;
    const std::size_t n = asio::read_until(socket, asio::dynamic_buffer(reply), '\n');
    reply.resize(n);
    std::cout << reply << std::flush;
    const auto parsed = nlohmann::json::parse(reply, nullptr, false);
    return parsed.is_object() && parsed.value("ok", false) ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "geoloco-faultproxy call: " << address << ": " << e.what() << "\n";
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"geoloco-faultproxy: a TCP proxy with a wide-area network's delay, bandwidth and faults"};
  std::string config_path, stats_path, for_text;
  app.add_option("--config", config_path, "the proxy's file: links, faults, schedule (docs/faultproxy.md)");
  app.add_option("--stats", stats_path, "write the counters here (JSON) when the proxy stops");
  app.add_option("--for", for_text, "stop after this long (e.g. 90s, 5m)");
  auto* call_cmd = app.add_subcommand("call", "send one request to a running proxy's control API");
  std::string address, request;
  call_cmd->add_option("address", address, "the control API's host:port")->required();
  call_cmd->add_option("request", request, "one JSON object, e.g. '{\"command\":\"stats\"}'")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (*call_cmd) return call(address, request);
  if (config_path.empty()) {
    std::cerr << "geoloco-faultproxy: --config FILE is required (or: call ADDRESS REQUEST)\n";
    return 2;
  }
  return run_proxy(config_path, stats_path, for_text);
}
