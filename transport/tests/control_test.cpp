// Control frames travel outside any operation, in order, to the handler;
// without a handler they are refused; for a job this site does not run
// (yet) they are dropped and the connection stays.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "transport/allreduce.h"
#include "transport/loopback.h"

using namespace geoloco;
using namespace geoloco::transport;
using namespace std::chrono_literals;

namespace {

// A site's part of an equal-weight all-reduce between a and b, spawned on its mesh.
std::future<Result<AllReduceStats>> spawn_round(loopback::Site& site, std::uint64_t round, std::span<const float> in,
                                                std::span<float> out, std::chrono::seconds timeout) {
  AllReduceRequest q;
  q.key = {round, 0};
  q.participants = {"a", "b"};
  q.weights = {1, 1};
  q.input = in;
  q.output = out;
  q.timeout = timeout;
  Mesh& mesh = site.mesh();
  return site.spawn([&mesh, q]() { return all_reduce(mesh, q); });
}

// a's frames of round 5 to b, named its observer, which has not begun it:
// with one data connection, they hold b's data reader.
void send_round_5_to_observer_b(loopback::Site& a) {
  std::vector<float> in(3000, 0.5f), out(3000, 0.0f);
  AllReduceRequest r;
  r.key = {5, 0};
  r.participants = {"a"};
  r.weights = {1};
  r.observers = {"b"};
  r.input = in;
  r.output = out;
  r.timeout = 20s;
  Mesh& ma = a.mesh();
  REQUIRE(a.spawn([&ma, r]() { return all_reduce(ma, r); }).get().ok());
}

}  // namespace

TEST_CASE("control frames reach the peer's handler in order, outside any all-reduce") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> received;  // touched on b's thread only
  loopback::record_control_frames(*sites[1], received);
  auto* a = sites[0].get();
  for (int i = 1; i <= 5; ++i) {
    const std::string text = "ready-" + std::to_string(i);
    Status sent = a->spawn([a, text, i]() -> asio::awaitable<Status> {
                     auto bytes = std::as_bytes(std::span(text.data(), text.size()));
                     co_return co_await a->mesh().send_control("b", static_cast<std::uint64_t>(i), bytes);
                   }).get();
    REQUIRE(sent.ok());
  }
  std::vector<std::string> got;
  for (int tries = 0; tries < 200 && got.size() < 5; ++tries) {
    std::this_thread::sleep_for(10ms);
    got = sites[1]->call([&] { return received; });
  }
  CHECK(got == std::vector<std::string>{"a:1:ready-1", "a:2:ready-2", "a:3:ready-3", "a:4:ready-4", "a:5:ready-5"});

  // a has no handler: b's control frame is refused, with its reason.
  Status sent = sites[1]
                    ->spawn([&]() -> asio::awaitable<Status> {
                      const std::string text = "plan";
                      co_return co_await sites[1]->mesh().send_control(
                          "a", 9, std::as_bytes(std::span(text.data(), text.size())));
                    })
                    .get();
  CHECK(sent.ok());
  bool refused = false;
  for (int tries = 0; tries < 200 && !refused; ++tries) {
    std::this_thread::sleep_for(10ms);
    refused = sites[0]->call([&] {
      for (const auto& r : sites[0]->mesh().rejections())
        if (r.reason.message() == "control frame from b, but this site takes none") return true;
      return false;
    });
  }
  CHECK(refused);
}

TEST_CASE("a control frame of a job this site does not run yet is dropped, and what follows still arrives") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> received;  // touched on b's thread only
  loopback::record_control_frames(*sites[1], received);
  auto* a = sites[0].get();
  auto* b = sites[1].get();
  auto send = [a](std::uint64_t round, const std::string& text) {
    return a
        ->spawn([a, round, text]() -> asio::awaitable<Status> {
          co_return co_await a->mesh().send_control("b", round, std::as_bytes(std::span(text.data(), text.size())));
        })
        .get();
  };
  a->call([&] {
    a->mesh().set_job(7);  // a's job started; b's start is on its way
    return true;
  });
  REQUIRE(send(1, "heartbeat").ok());
  std::uint64_t dropped = 0;
  for (int tries = 0; tries < 200 && dropped == 0; ++tries) {
    std::this_thread::sleep_for(10ms);
    dropped = b->call([&] { return b->mesh().foreign_job_frames(); });
  }
  CHECK(dropped == 1);
  b->call([&] {
    b->mesh().set_job(7);
    return true;
  });
  REQUIRE(send(2, "plan").ok());
  std::vector<std::string> got;
  for (int tries = 0; tries < 200 && got.empty(); ++tries) {
    std::this_thread::sleep_for(10ms);
    got = b->call([&] { return received; });
  }
  CHECK(got == std::vector<std::string>{"a:2:plan"});
  CHECK(b->call([&] { return b->mesh().rejections().size(); }) == 0);  // nothing refused, no connection closed
}

TEST_CASE("control frames arrive while a data connection waits for an operation this site has not begun") {
  // b is named an observer of round 5 but has not begun it: a's gather
  // frames for round 5 hold b's data reader. a's control frame (a PLAN, an
  // ABORT, a heartbeat) must still arrive: it may be the very message that
  // lets b begin, or give up, round 5.
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto options = loopback::test_options();
  options.connections_per_peer = 1;  // one data connection: round 5's frames fill it
  auto made = loopback::make_sites(**federation, {"a", "b"}, options);
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> received;  // touched on b's thread only
  loopback::record_control_frames(*sites[1], received);
  send_round_5_to_observer_b(*sites[0]);
  auto* a = sites[0].get();
  REQUIRE(a->spawn([a]() -> asio::awaitable<Status> {
             const std::string text = "plan-5";
             co_return co_await a->mesh().send_control("b", 5, std::as_bytes(std::span(text.data(), text.size())));
           })
              .get()
              .ok());
  auto got = [&] { return sites[1]->call([&] { return received; }); };
  for (int tries = 0; tries < 200 && got().empty(); ++tries) std::this_thread::sleep_for(10ms);
  CHECK(got() == std::vector<std::string>{"a:5:plan-5"});
  CHECK(sites[1]->call([&] { return sites[1]->mesh().declined_frames(); }) == 0);  // round 5's frames still wait
  // Declined: round 5's frames are read and dropped, nothing is refused,
  // and the connection stays for the next round.
  sites[1]->call([&] {
    sites[1]->mesh().decline({5, 0});
    return 0;
  });
  std::uint64_t dropped = 0;
  for (int tries = 0; tries < 200 && dropped == 0; ++tries) {
    std::this_thread::sleep_for(10ms);
    dropped = sites[1]->call([&] { return sites[1]->mesh().declined_frames(); });
  }
  CHECK(dropped >= 1);
  CHECK(sites[1]->call([&] { return sites[1]->mesh().rejections().size(); }) == 0);
  std::vector<std::vector<float>> ins(2, std::vector<float>(3000, 1.0f)), outs(2, std::vector<float>(3000, 0.0f));
  std::vector<std::future<Result<AllReduceStats>>> round6;
  for (int s = 0; s < 2; ++s) round6.push_back(spawn_round(*sites[s], 6, ins[s], outs[s], 20s));
  for (const auto& res : loopback::wait_all(round6)) REQUIRE(res.ok());
  CHECK(outs[1] == ins[1]);
}

TEST_CASE("frames of an operation this site never heard of are dropped once it declines a later one") {
  // b refused the PLAN of round 5 (from a coordinator it did not follow):
  // a's round-5 frames hold b's only data connection, and the state frame a
  // sends behind them waits too. Declining round 7 (b catches up) means
  // round 5 will never run here either: its frames go, the state arrives.
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto options = loopback::test_options();
  options.connections_per_peer = 1;
  auto made = loopback::make_sites(**federation, {"a", "b"}, options);
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> received;  // touched on b's thread only
  loopback::record_control_frames(*sites[1], received);
  send_round_5_to_observer_b(*sites[0]);
  Mesh& ma = sites[0]->mesh();
  FrameHeader state;
  state.type = FrameType::state;
  state.round = 6;
  const std::string text = "state-6";
  REQUIRE(sites[0]
              ->spawn([&ma, state, text]() -> asio::awaitable<Status> {
                co_return co_await ma.send_state_frame("b", state, std::as_bytes(std::span(text.data(), text.size())),
                                                       0);
              })
              .get()
              .ok());
  auto got = [&] { return sites[1]->call([&] { return received; }); };
  std::this_thread::sleep_for(200ms);
  CHECK(got().empty());  // behind round 5's frames
  sites[1]->call([&] {
    sites[1]->mesh().decline({7, 0});
    return 0;
  });
  for (int tries = 0; tries < 200 && got().empty(); ++tries) std::this_thread::sleep_for(10ms);
  CHECK(got() == std::vector<std::string>{"a:6:state-6"});
  CHECK(sites[1]->call([&] { return sites[1]->mesh().declined_frames(); }) >= 1);
  CHECK(sites[1]->call([&] { return sites[1]->mesh().rejections().size(); }) == 0);
  // A later round runs as usual: beginning it lifts the rule for what follows.
  std::vector<std::vector<float>> ins(2, std::vector<float>(3000, 1.0f)), outs(2, std::vector<float>(3000, 0.0f));
  std::vector<std::future<Result<AllReduceStats>>> round8;
  for (int s = 0; s < 2; ++s) round8.push_back(spawn_round(*sites[s], 8, ins[s], outs[s], 20s));
  for (const auto& res : loopback::wait_all(round8)) REQUIRE(res.ok());
  CHECK(outs[1] == ins[1]);
}

TEST_CASE("control frames travel on the control connection only, data and state frames never on it") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> received;
  loopback::record_control_frames(*sites[1], received);
  auto* a = sites[0].get();
  Mesh& ma = a->mesh();
  const int control = ma.control_slot();
  CHECK(control == loopback::test_options().connections_per_peer);
  const std::string text = "x";
  const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  // The sending side refuses a frame for the wrong kind of connection.
  FrameHeader state;
  state.type = FrameType::state;
  FrameHeader plan;
  plan.type = FrameType::control;
  auto send = [&](auto body) {
    return a->spawn([body]() -> asio::awaitable<Status> { co_return co_await body(); }).get();
  };
  Status s1 = send([&]() { return ma.send_control_frame("b", state, bytes); });
  CHECK(s1.message() == "send_control_frame sends control frames, not state");
  Status s2 = send([&]() { return ma.send_state_frame("b", state, bytes, control); });
  CHECK(s2.message() == "state frames travel on data connections 0..1, not 2");
  Status s3 = send([&]() { return ma.send_state_frame("b", plan, bytes, 0); });
  CHECK(s3.message() == "send_state_frame sends state frames, not control");
  // The receiving side refuses one that came anyway, and closes that connection.
  auto refused = [&](const std::string& reason) {
    for (int tries = 0; tries < 200; ++tries) {
      bool seen = sites[1]->call([&] {
        for (const auto& r : sites[1]->mesh().rejections())
          if (r.reason.message() == reason) return true;
        return false;
      });
      if (seen) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  REQUIRE(send([&]() { return ma.connection("b", 0)->write_frame(plan, bytes); }).ok());
  CHECK(refused("control frame from a on data connection 0; control frames travel on the control connection only"));
  REQUIRE(send([&]() { return ma.connection("b", control)->write_frame(state, bytes); }).ok());
  CHECK(refused("state frame from a on the control connection, which carries control frames only"));
  CHECK(sites[1]->call([&] { return received; }).empty());
}

TEST_CASE("an operation declined and then begun runs: its frames are delivered, none dropped") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  Mesh& mb = sites[1]->mesh();
  sites[1]->call([&] {
    mb.decline({3, 0});
    return 0;
  });
  std::vector<std::vector<float>> ins(2, std::vector<float>(3000, 2.0f)), outs(2, std::vector<float>(3000, 0.0f));
  std::vector<std::future<Result<AllReduceStats>>> runs;
  runs.push_back(spawn_round(*sites[1], 3, ins[1], outs[1], 20s));
  // a sends only once b runs round 3: frames that came before would have been dropped.
  bool begun = false;
  for (int tries = 0; tries < 500 && !begun; ++tries) {
    begun = sites[1]->call([&] { return mb.current() == std::optional<OpKey>(OpKey{3, 0}); });
    if (!begun) std::this_thread::sleep_for(10ms);
  }
  REQUIRE(begun);
  runs.insert(runs.begin(), spawn_round(*sites[0], 3, ins[0], outs[0], 20s));
  for (const auto& r : loopback::wait_all(runs)) REQUIRE(r.ok());
  CHECK(outs[1] == ins[1]);
  CHECK(sites[1]->call([&] { return mb.declined_frames(); }) == 0);
}

TEST_CASE("cancelling the operation in flight ends its all-reduce at once, with the reason") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  // b never joins round 4: a's all-reduce would wait for its timeout (60 s).
  std::vector<float> in(3000, 1.0f), out(3000, 0.0f);
  const auto started = std::chrono::steady_clock::now();
  auto run = spawn_round(*sites[0], 4, in, out, 60s);
  std::this_thread::sleep_for(200ms);
  sites[0]->call([&] {
    sites[0]->mesh().cancel({4, 0}, Status(Err::io, "the job is ending"));
    return 0;
  });
  auto result = run.get();
  CHECK(result.status().message() == "the job is ending");
  CHECK(std::chrono::steady_clock::now() - started < 10s);
}

TEST_CASE("a peer whose mesh stops is reported lost at once through the link handler, and counted") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> events;  // touched on b's thread only
  sites[1]->call([&] {
    sites[1]->mesh().set_link_handler([&events](const std::string& peer, bool up, const Status& why) {
      events.push_back(peer + (up ? " up" : " down: " + why.message()));
    });
    return 0;
  });
  CHECK(sites[1]->call([&] { return sites[1]->mesh().peer_links().at("a").up; }));
  sites[0]->call([&] {
    sites[0]->mesh().stop();  // as a killed process: every socket closes
    return 0;
  });
  std::vector<std::string> got;
  for (int tries = 0; tries < 300 && got.empty(); ++tries) {
    std::this_thread::sleep_for(10ms);
    got = sites[1]->call([&] { return events; });
  }
  REQUIRE(got.size() == 1);
  CHECK(got[0].rfind("a down: ", 0) == 0);
  // The close itself is the signal, not the read watchdog's silence.
  CHECK(got[0].find("no data from") == std::string::npos);
  const PeerLink link = sites[1]->call([&] { return sites[1]->mesh().peer_links().at("a"); });
  CHECK_FALSE(link.up);
  CHECK(link.drops == 1);
  CHECK_FALSE(link.last_error.empty());
}

TEST_CASE("a site started again is dialed at once: its knock cuts the dialer's backoff short") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  TransportOptions options = loopback::test_options();
  options.reconnect_initial_ms = 4000;  // a's dialers wait 8 s after b is gone
  options.reconnect_max_ms = 8000;
  auto made = loopback::make_sites(**federation, {"a", "b"}, options);
  REQUIRE(made.ok());
  auto& sites = *made;
  const std::uint16_t port = sites[1]->port();
  sites[1].reset();  // b stops; a dials it once, is refused, and backs off
  std::this_thread::sleep_for(300ms);
  auto b = loopback::Site::create("b", (*federation)->files("b"), options, 1, {"a", "b"}, port);
  REQUIRE(b.ok());
  loopback::Site* again = b->get();
  const auto started = std::chrono::steady_clock::now();
  REQUIRE(again->connect({sites[0].get(), again}).ok());
  const Status up = again->spawn([again]() { return again->mesh().wait_connected({"a", "b"}, 3s); }).get();
  CHECK(up.ok());
  CHECK(std::chrono::steady_clock::now() - started < 2s);
  bool a_up = false;  // a installs its side once it reads b's answer to its hello
  for (int tries = 0; tries < 100 && !a_up; ++tries) {
    a_up = sites[0]->call([&] { return sites[0]->mesh().peer_links().at("b").up; });
    if (!a_up) std::this_thread::sleep_for(10ms);
  }
  CHECK(a_up);
}
