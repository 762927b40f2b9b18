#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <map>

#include "daemon/site_config.h"

using namespace geoloco;
using namespace geoloco::daemon;

namespace {
Result<SiteConfig> parse(const std::string& text) { return parse_site_yaml(YAML::Load(text), "site.yaml"); }
}  // namespace

TEST_CASE("a site file fills every field; absent ones keep their defaults") {
  auto c = parse(R"(name: eu-west
listen: 0.0.0.0:7500
peers:
  - {name: us-east, address: us-east.example.org:7400}
  - {name: ap-south, address: "[::1]:7401"}
tls: {ca: /tls/ca.pem, cert: /tls/site.pem, key: /tls/site.key}
data_dir: /srv/geoloco
gpus: [0, 1]
transport: {connections_per_peer: 8, rate_limit: 900M, io_threads: 6, read_timeout: 30s, keepalive_interval: 2s}
)");
  INFO(c.status().message());
  REQUIRE(c.ok());
  CHECK(c->name == "eu-west");
  CHECK(c->listen.port == 7500);
  REQUIRE(c->peers.size() == 2);
  CHECK(c->peers[0].host == "us-east.example.org");
  CHECK(c->peers[1].host == "::1");
  CHECK(c->peers[1].port == 7401);
  CHECK(c->tls.key_file == "/tls/site.key");
  CHECK(c->gpus == std::vector<int>{0, 1});
  CHECK(c->transport.connections_per_peer == 8);
  CHECK(c->transport.rate_limit_mbit == 900);
  CHECK(c->transport.io_threads == 6);
  CHECK(c->transport.read_timeout_ms == 30000);
  CHECK(c->transport.keepalive_interval_ms == 2000);
  CHECK(c->metrics.port == 9400);  // default
  CHECK(c->control_socket == "/run/geoloco/geolocod.sock");
}

TEST_CASE("every problem of a site file is reported with line and column") {
  auto c = parse(R"(name: EU_West
listen: nowhere
peers:
  - {name: us-east}
colour: blue
transport: {read_timeout: soon}
)");
  REQUIRE_FALSE(c.ok());
  const std::string m = c.status().message();
  INFO(m);
  CHECK(m.find("site.yaml:2:9: listen: 'nowhere' is not host:port") != std::string::npos);
  CHECK(m.find("site.yaml:4:5: peers: each peer is {name: ..., address: host:port}") != std::string::npos);
  CHECK(m.find("site.yaml:5:1: unknown key 'colour'") != std::string::npos);
  CHECK(m.find("site.yaml:6:27: transport.read_timeout: expected a duration") != std::string::npos);

  auto old_cap = parse("name: a\ntransport: {rate_limit_mbit: 900}\n");
  CHECK(old_cap.status().message().find("transport.rate_limit_mbit is now transport.rate_limit, in bit/s with a "
                                        "suffix (rate_limit_mbit: 900 is rate_limit: 900M)") != std::string::npos);
  auto slip = parse("name: a\ntransport: {rate_limit: 900}\n");
  CHECK(slip.status().message().find("a cap of 900 bit/s is below 1 kbit/s") != std::string::npos);

  auto bad_name = parse("name: EU_West\n");
  REQUIRE_FALSE(bad_name.ok());
  CHECK(bad_name.status().message().find("name: a site name uses only a-z, 0-9") != std::string::npos);
  auto no_name = parse("listen: 0.0.0.0:1\n");
  CHECK(no_name.status().message().find("name: missing") != std::string::npos);
  auto self_peer = parse("name: a\npeers: [{name: a, address: 'h:1'}]\n");
  CHECK(self_peer.status().message().find("peers: 'a' is this site itself") != std::string::npos);
  auto no_threads = parse("name: a\ntransport: {io_threads: 0}\n");
  CHECK(no_threads.status().message().find("transport: io_threads must be 1..64, got 0") != std::string::npos);
}

TEST_CASE("flags override the environment, which overrides the file") {
  auto c = parse("name: eu-west\nlisten: 0.0.0.0:7400\ndata_dir: /from/file\n");
  REQUIRE(c.ok());
  std::map<std::string, std::string> env{{"GEOLOCO_DATA_DIR", "/from/env"}, {"GEOLOCO_LISTEN", "127.0.0.1:7600"}};
  auto getenv = [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  REQUIRE(apply_environment(*c, getenv).ok());
  CHECK(c->data_dir == "/from/env");
  CHECK(c->listen.port == 7600);
  REQUIRE(apply_override(*c, "--data-dir", "/from/flag").ok());
  CHECK(c->data_dir == "/from/flag");

  env["GEOLOCO_RATE_LIMIT"] = "1.5G";
  REQUIRE(apply_environment(*c, getenv).ok());
  CHECK(c->transport.rate_limit_mbit == 1500);
  env["GEOLOCO_RATE_LIMIT"] = "fast";
  Status s = apply_environment(*c, getenv);
  CHECK(
      s.message() ==
      "GEOLOCO_RATE_LIMIT (--rate-limit): --rate-limit: 'fast': expected a number > 0 with an optional suffix k, M, G, "
      "T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024), or 0 for no cap");
  env.erase("GEOLOCO_RATE_LIMIT");
  env["GEOLOCO_RATE_LIMIT_MBIT"] = "900";
  CHECK(apply_environment(*c, getenv).message() ==
        "GEOLOCO_RATE_LIMIT_MBIT is now GEOLOCO_RATE_LIMIT, in bit/s with a suffix (900 Mbit/s is 900M)");
  CHECK(overridable_settings().size() == 7);
}

TEST_CASE("host:port parsing") {
  CHECK(parse_host_port("a:1")->host == "a");
  CHECK(parse_host_port("[::1]:80")->host == "::1");
  CHECK_FALSE(parse_host_port("a").ok());
  CHECK_FALSE(parse_host_port("a:99999").ok());
  CHECK_FALSE(parse_host_port(":80").ok());
}

TEST_CASE("the tls section names a CRL and how early to warn about expiry") {
  auto c = parse(R"(name: eu-west
tls: {ca: /tls/ca.pem, cert: /tls/site.pem, key: /tls/site.key, crl: /tls/crl.pem, expiry_warning: 14d}
)");
  INFO(c.status().message());
  REQUIRE(c.ok());
  CHECK(c->tls.crl_file == "/tls/crl.pem");
  CHECK(c->tls_expiry_warning_s == 14 * 86400);
  auto defaults = parse("name: eu-west\n");
  REQUIRE(defaults.ok());
  CHECK(defaults->tls.crl_file.empty());
  CHECK(defaults->tls_expiry_warning_s == 30 * 86400);
  auto bad = parse("name: eu-west\ntls: {crl: /tls/crl.pem, expiry: soon}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(),
             Catch::Contains("unknown key 'expiry' (allowed: ca, cert, key, crl, expiry_warning)"));
}

TEST_CASE("a reload names the settings it leaves for a restart, not the tls section it applies") {
  auto running = parse(R"(name: eu-west
listen: 0.0.0.0:7500
peers: [{name: us-east, address: us-east.example.org:7400}]
tls: {ca: /tls/ca.pem, cert: /tls/site.pem, key: /tls/site.key}
)");
  REQUIRE(running.ok());
  SiteConfig loaded = *running;
  loaded.tls.cert_file = "/tls/site-2027.pem";
  loaded.tls.crl_file = "/tls/crl.pem";
  loaded.tls_expiry_warning_s = 86400;
  CHECK(settings_needing_restart(*running, loaded).empty());
  loaded.listen.port = 7501;
  loaded.peers[0].port = 7401;
  loaded.transport.connections_per_peer = 8;
  loaded.heartbeat_timeout_ms = 90000;
  loaded.step_threads = 3;
  CHECK(settings_needing_restart(*running, loaded) ==
        std::vector<std::string>{"listen", "peers", "transport", "heartbeat", "step_threads"});
}

TEST_CASE("step_threads: the passes' threads, 0 for a core each up to 8, a bad count refused") {
  auto automatic = parse("name: eu-west\n");
  REQUIRE(automatic.ok());
  CHECK(automatic->step_threads == 0);
  CHECK(automatic->pass_threads() >= 1);
  CHECK(automatic->pass_threads() <= 8);
  auto four = parse("name: eu-west\nstep_threads: 4\n");
  REQUIRE(four.ok());
  CHECK(four->pass_threads() == 4u);
  auto negative = parse("name: eu-west\nstep_threads: -1\n");
  REQUIRE_FALSE(negative.ok());
  CHECK_THAT(negative.status().message(),
             Catch::Contains("step_threads: expected 0 (a thread per core, up to 8) to 256, got -1"));
  auto words = parse("name: eu-west\nstep_threads: many\n");
  REQUIRE_FALSE(words.ok());
  CHECK_THAT(words.status().message(), Catch::Contains("step_threads"));
}

TEST_CASE("a duration too long for its setting is refused, not wrapped around") {
  auto c = parse(
      "name: eu-west\ntransport: {read_timeout: 99999999d}\nheartbeat: {interval: 2s, timeout: 30d}\n"
      "tls: {expiry_warning: 1e300s}\n");
  REQUIRE_FALSE(c.ok());
  const std::string m = c.status().message();
  INFO(m);
  CHECK(m.find("transport.read_timeout: 99999999d is too long (at most 3650d)") != std::string::npos);
  CHECK(m.find("heartbeat.timeout: at most a day (24h), got 30d") != std::string::npos);
  CHECK(m.find("tls.expiry_warning: 1e300s is too long (at most 3650d)") != std::string::npos);
}
