// The schedule's meaning with a fixed clock: changes in time order on top of
// the file's faults, `clear`, "*", the control API's changes, flapping
// windows, the resets due in an interval, and when to look again.
#include <catch2/catch.hpp>
#include <yaml-cpp/yaml.h>

#include <cmath>

#include "common/yaml_reader.h"
#include "faultproxy/timeline.h"

using namespace geoloco::faultproxy;

namespace {

FaultChange change(const std::string& yaml_text) {
  geoloco::yaml::Problems p("test");
  FaultChange c = parse_change(YAML::Load(yaml_text), "", p);
  INFO(p.status().message());
  REQUIRE(p.empty());
  return c;
}

Timeline make(std::vector<TimedChange> schedule) {
  LinkFaults ab;
  ab.up.latency_s = ab.down.latency_s = 0.05;
  return Timeline({{"a-b", ab}, {"a-c", {}}}, std::move(schedule));
}

}  // namespace

TEST_CASE("changes apply in time order on top of the file's faults; clear puts the file's back") {
  Timeline t = make({
      {20, "a-b", change("{clear: true}")},
      {10, "a-b", change("{both: {partition: true}, up: {rate: 100M}}")},
      {15, "*", change("{down: {latency: 300ms}}")},
  });
  CHECK(t.state("a-b", 0).up.latency_s == 0.05);
  CHECK_FALSE(t.state("a-b", 9.99).up.partition);
  const LinkFaults at10 = t.state("a-b", 10);
  CHECK(at10.up.partition);
  CHECK(at10.down.partition);
  CHECK(at10.up.rate_bps == 1e8);
  CHECK(at10.down.rate_bps == 0);
  CHECK(at10.up.latency_s == 0.05);  // untouched fields keep the file's
  CHECK(t.state("a-b", 15).down.latency_s == Approx(0.3));
  CHECK(t.state("a-c", 15).down.latency_s == Approx(0.3));  // "*" is every link
  CHECK_FALSE(t.state("a-c", 15).up.partition);
  const LinkFaults at20 = t.state("a-b", 20);
  CHECK_FALSE(at20.up.partition);
  CHECK(at20.up.rate_bps == 0);
  CHECK(at20.down.latency_s == 0.05);
  CHECK(t.state("a-c", 20).down.latency_s == Approx(0.3));  // the clear named a-b only
  CHECK(t.known("a-b"));
  CHECK(t.known("*"));
  CHECK_FALSE(t.known("b-c"));
}

TEST_CASE("a change added at the same time as a scheduled one wins") {
  Timeline t = make({{10, "a-b", change("{up: {blackhole: true}}")}});
  t.add({10, "a-b", change("{up: {blackhole: false}}")});
  CHECK_FALSE(t.state("a-b", 10).up.blackhole);
  t.add({5, "a-b", change("{up: {jitter: 1ms}}")});
  CHECK(t.state("a-b", 6).up.jitter_s == Approx(0.001));
  CHECK_FALSE(t.state("a-b", 6).up.blackhole);
}

TEST_CASE("resets and flapping: refused in each down window, reset at each window's start") {
  Timeline t = make({
      {4, "a-b", change("{reset: true}")},
      {10, "a-b", change("{flap: {period: 3s, down: 500ms}}")},
      {20, "a-b", change("{flap: {period: 0, down: 0}}")},
  });
  CHECK(t.resets_between("a-b", 0, 3.9) == 0);
  CHECK(t.resets_between("a-b", 3.9, 4) == 1);
  CHECK(t.resets_between("a-b", 4, 4.5) == 0);
  CHECK(t.resets_between("a-c", 0, 100) == 0);
  // Down windows start at 10, 13, 16, 19 (and the flapping stops at 20).
  CHECK(t.resets_between("a-b", 9, 10) == 1);
  CHECK(t.resets_between("a-b", 10, 12.9) == 0);
  CHECK(t.resets_between("a-b", 12.9, 13.1) == 1);
  CHECK(t.resets_between("a-b", 9, 30) == 4);
  CHECK(t.resets_between("a-b", 0, 30) == 5);
  CHECK(t.refusing("a-b", 10.2));
  CHECK_FALSE(t.refusing("a-b", 10.6));
  CHECK(t.refusing("a-b", 13.4));
  CHECK_FALSE(t.refusing("a-b", 19.6));
  CHECK_FALSE(t.refusing("a-b", 21));
  CHECK_FALSE(t.refusing("a-c", 10.2));
}

TEST_CASE("next_event_after: each change, each flap edge, then nothing") {
  Timeline t = make({
      {4, "a-b", change("{reset: true}")},
      {10, "a-c", change("{flap: {period: 2s, down: 500ms}}")},
      {15, "a-c", change("{clear: true}")},
  });
  CHECK(t.next_event_after(-1) == 4);
  CHECK(t.next_event_after(4) == 10);
  CHECK(t.next_event_after(10) == Approx(10.5));
  CHECK(t.next_event_after(10.5) == Approx(12));
  CHECK(t.next_event_after(12.1) == Approx(12.5));
  CHECK(t.next_event_after(14.6) == Approx(15));  // the clear comes before the next window
  CHECK(std::isinf(t.next_event_after(15)));
}

TEST_CASE("refuse holds until set back") {
  Timeline t = make({{1, "a-c", change("{refuse: true}")}, {2, "a-c", change("{refuse: false}")}});
  CHECK_FALSE(t.refusing("a-c", 0.5));
  CHECK(t.refusing("a-c", 1.5));
  CHECK_FALSE(t.refusing("a-c", 2));
  CHECK(describe(t.state("a-c", 1.5)) == "refuse");
  CHECK(describe(t.state("a-c", 3)) == "none");
  CHECK(describe(t.state("a-b", 3)) == "up.latency=50ms down.latency=50ms");
}
