// The control outbox between two loopback sites: frames arrive in order,
// and frames for a peer that cannot be reached are given up and counted,
// the oldest dropped first when its queue is full.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "daemon/control_outbox.h"
#include "transport/loopback.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace geoloco::transport;
using namespace std::chrono_literals;

namespace {
FrameHeader control_frame(std::uint64_t round) {
  FrameHeader h;
  h.type = FrameType::control;
  h.job = 1;  // the loopback sites' job
  h.round = round;
  return h;
}
}  // namespace

TEST_CASE("the outbox delivers a peer's frames in the order they were queued; send_now goes beside the queue") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> received;  // touched on b's thread only
  loopback::record_control_frames(*sites[1], received);
  Mesh& ma = sites[0]->mesh();
  auto outbox = sites[0]->call([&] { return ControlOutbox::create(ma.executor(), ma, "test"); });
  sites[0]->call([&] {
    for (int i = 1; i <= 20; ++i) outbox->send("b", control_frame(i), cat("m", i));
    return 0;
  });
  std::vector<std::string> expected;
  for (int i = 1; i <= 20; ++i) expected.push_back(cat("a:", i, ":m", i));
  std::vector<std::string> got;
  for (int tries = 0; tries < 500 && got.size() < 20; ++tries) {
    std::this_thread::sleep_for(10ms);
    got = sites[1]->call([&] { return received; });
  }
  CHECK(got == expected);
  sites[0]->call([&] {
    outbox->send_now("b", control_frame(99), "now");
    return 0;
  });
  for (int tries = 0; tries < 500 && got.size() < 21; ++tries) {
    std::this_thread::sleep_for(10ms);
    got = sites[1]->call([&] { return received; });
  }
  REQUIRE(got.size() == 21);
  CHECK(got.back() == "a:99:now");
  CHECK(sites[0]->call([&] { return outbox->lost() + outbox->dropped(); }) == 0);

  // A full queue drops its oldest: 30 is in flight, 31..33 wait, 34 pushes out 31.
  OutboxOptions small;
  small.max_queued = 3;
  auto bounded = sites[0]->call([&] { return ControlOutbox::create(ma.executor(), ma, "test", small); });
  sites[0]->call([&] {
    for (int i = 30; i <= 34; ++i) bounded->send("b", control_frame(i), "q");
    return 0;
  });
  for (int tries = 0; tries < 500 && got.size() < 25; ++tries) {
    std::this_thread::sleep_for(10ms);
    got = sites[1]->call([&] { return received; });
  }
  CHECK(std::vector<std::string>(got.begin() + 21, got.end()) ==
        std::vector<std::string>{"a:30:q", "a:32:q", "a:33:q", "a:34:q"});
  CHECK(sites[0]->call([&] { return bounded->dropped(); }) == 1);
  sites[0]->call([&] {
    outbox.reset();  // released on a's executor, where they live
    bounded.reset();
    return 0;
  });
}

TEST_CASE("frames for an unreachable peer are tried, then given up and counted; a full queue drops its oldest") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  Mesh& ma = sites[0]->mesh();
  OutboxOptions o;
  o.max_queued = 3;
  o.tries = 2;
  o.pause = 1ms;
  auto outbox = sites[0]->call([&] { return ControlOutbox::create(ma.executor(), ma, "test", o); });
  // The first frame leaves the queue at once (the drain starts on this
  // executor, inside send); 2..5 queue behind it, and 2 is dropped for 5.
  CHECK(sites[0]->call([&] {
    for (int i = 1; i <= 5; ++i) outbox->send("zed", control_frame(i), "x");
    return outbox->queued("zed");
  }) == 3);
  CHECK(sites[0]->call([&] { return outbox->dropped(); }) == 1);
  std::uint64_t lost = 0;
  for (int tries = 0; tries < 500 && lost < 4; ++tries) {
    std::this_thread::sleep_for(10ms);
    lost = sites[0]->call([&] { return outbox->lost(); });
  }
  CHECK(lost == 4);
  CHECK(sites[0]->call([&] { return outbox->queued("zed"); }) == 0);
  sites[0]->call([&] {
    outbox.reset();
    return 0;
  });
}

TEST_CASE("a frame waiting out its pause between tries is tried at once when the link comes up") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  Mesh& ma = sites[0]->mesh();
  OutboxOptions o;
  o.tries = 2;
  o.pause = 60s;  // without link_up the second try would come a minute later
  auto outbox = sites[0]->call([&] { return ControlOutbox::create(ma.executor(), ma, "test", o); });
  sites[0]->call([&] {
    outbox->send("zed", control_frame(1), "x");
    return 0;
  });
  std::uint64_t lost = 0;
  for (int tries = 0; tries < 100 && lost == 0; ++tries) {
    std::this_thread::sleep_for(20ms);
    lost = sites[0]->call([&] {
      outbox->link_up("zed");  // the second try happens now (and fails: zed is no peer), so the frame is given up
      return outbox->lost();
    });
  }
  CHECK(lost == 1);
  sites[0]->call([&] {
    outbox.reset();
    return 0;
  });
}
