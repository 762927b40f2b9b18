// The proxy's file: every field read, and every mistake reported with its
// line and what was expected.
#include <catch2/catch.hpp>

#include "faultproxy/config.h"

using namespace geoloco::faultproxy;

namespace {
std::string error_of(const std::string& text) {
  auto c = parse_config(text, "proxy.yaml");
  REQUIRE_FALSE(c.ok());
  return c.status().message();
}
}  // namespace

TEST_CASE("a whole file is read field by field") {
  auto c = parse_config(R"(
control: 127.0.0.1:7700
seed: 42
window: 1Mi
links:
  - name: a-b
    listen: 127.0.0.1:17411
    connect: 127.0.0.1:7411
    both: {latency: 50ms, jitter: 5ms}
    up: {rate: 100M, slice: 512, slice_delay: 1ms, close_after: 1Mi}
    down: {blackhole: false, partition: false}
  - {name: a-c, listen: "127.0.0.1:0", connect: "localhost:7412", refuse: true, flap: {period: 3s, down: 1s}}
schedule:
  - {at: 10s, link: a-b, both: {partition: true}}
  - {at: 1.5m, link: "*", clear: true, reset: true}
)",
                        "proxy.yaml");
  INFO(c.status().message());
  REQUIRE(c.ok());
  CHECK(c->control->port == 7700);
  CHECK(c->seed == 42);
  CHECK(c->window_bytes == 1024 * 1024);
  REQUIRE(c->links.size() == 2);
  const LinkConfig& ab = c->links[0];
  CHECK(ab.name == "a-b");
  CHECK(ab.listen.port == 17411);
  CHECK(ab.connect.port == 7411);
  CHECK(ab.faults.up.latency_s == Approx(0.05));
  CHECK(ab.faults.down.latency_s == Approx(0.05));
  CHECK(ab.faults.down.jitter_s == Approx(0.005));
  CHECK(ab.faults.up.rate_bps == 1e8);
  CHECK(ab.faults.down.rate_bps == 0);
  CHECK(ab.faults.up.slice_bytes == 512);
  CHECK(ab.faults.up.slice_delay_s == Approx(0.001));
  CHECK(ab.faults.up.close_after_bytes == 1024 * 1024);
  const LinkConfig& ac = c->links[1];
  CHECK(ac.connect.host == "localhost");
  CHECK(ac.faults.refuse);
  CHECK(ac.faults.flap_period_s == 3);
  CHECK(ac.faults.flap_down_s == 1);
  REQUIRE(c->schedule.size() == 2);
  CHECK(c->schedule[0].at_s == 10);
  CHECK(c->schedule[0].change.text == "both.partition=true");
  CHECK(c->schedule[1].at_s == 90);
  CHECK(c->schedule[1].link == "*");
  CHECK(c->schedule[1].change.clear);
  CHECK(c->schedule[1].change.reset);
}

TEST_CASE("mistakes are named with their line") {
  CHECK_THAT(error_of("links: []\n"), Catch::Contains("links: expected a list"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1:1}\n"), Catch::Contains("connect is missing"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1, connect: 127.0.0.1:2}\n"),
             Catch::Contains("proxy.yaml:2:") && Catch::Contains("is not host:port"));
  CHECK_THAT(error_of("control: 0.0.0.0:7700\nlinks:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2}\n"),
             Catch::Contains("is not a loopback address"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2, up: {latncy: 5ms}}\n"),
             Catch::Contains("proxy.yaml:2:") && Catch::Contains("up.latncy: unknown fault"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2, up: {rate: 900}}\n"),
             Catch::Contains("below 1 kbit/s"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2, up: {latency: fast}}\n"),
             Catch::Contains("up.latency: expected a duration"));
  CHECK_THAT(
      error_of("links:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2, flap: {period: 1s, down: 2s}}\n"),
      Catch::Contains("must be shorter than the period"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2}\n"
                      "  - {name: a, listen: 127.0.0.1:3, connect: 127.0.0.1:4}\n"),
             Catch::Contains("proxy.yaml:3:") && Catch::Contains("'a' is named twice"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2}\n"
                      "schedule:\n  - {at: 5s, link: b, reset: true}\n"),
             Catch::Contains("proxy.yaml:4:") && Catch::Contains("'b' is not one of the links"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2}\n"
                      "schedule:\n  - {at: 5s, link: a}\n"),
             Catch::Contains("changes nothing"));
  CHECK_THAT(error_of("links:\n  - {name: a, listen: 127.0.0.1:1, connect: 127.0.0.1:2}\nextra: 1\n"),
             Catch::Contains("extra: unknown key"));
  // Every problem at once.
  const std::string both = error_of("links:\n  - {name: a, listen: x, connect: y, up: {slice: -1}}\n");
  CHECK_THAT(both,
             Catch::Contains("links[0].listen") && Catch::Contains("links[0].connect") && Catch::Contains("up.slice"));
}
