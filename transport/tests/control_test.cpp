// Control frames travel outside any operation, in order, to the handler;
// without a handler, or for another job, they are refused.
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
  Status sent = sites[1]->spawn([&]() -> asio::awaitable<Status> {
                   const std::string text = "plan";
                   co_return co_await sites[1]->mesh().send_control("a", 9, std::as_bytes(std::span(text.data(), text.size())));
                 }).get();
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

TEST_CASE("a declined operation's frames are dropped, so the control frames behind them still arrive") {
  // b is named an observer of round 5 but never runs it (a site catching
  // up): a's gather frames for round 5 would hold b's reader, and with it
  // every control frame behind them on that connection, until b declines it.
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto options = loopback::test_options();
  options.connections_per_peer = 1;  // one connection: control frames queue behind the data
  auto made = loopback::make_sites(**federation, {"a", "b"}, options);
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> received;  // touched on b's thread only
  sites[1]->call([&] {
    sites[1]->mesh().set_control_handler([&](const std::string& peer, const FrameHeader&, Buffer payload) {
      received.push_back(cat(peer, ":", std::string(reinterpret_cast<const char*>(payload.data()), payload.size())));
      return Status();
    });
    return 0;
  });
  std::vector<float> in(3000, 0.5f), out(3000, 0.0f);
  AllReduceRequest r;
  r.key = {5, 0};
  r.participants = {"a"};
  r.weights = {1};
  r.observers = {"b"};
  r.input = in;
  r.output = out;
  r.timeout = 20s;
  Mesh& ma = sites[0]->mesh();
  REQUIRE(sites[0]->spawn([&ma, r]() { return all_reduce(ma, r); }).get().ok());
  auto* a = sites[0].get();
  REQUIRE(a->spawn([a]() -> asio::awaitable<Status> {
               const std::string text = "offer";
               co_return co_await a->mesh().send_control("b", 5, std::as_bytes(std::span(text.data(), text.size())));
             }).get().ok());
  auto got = [&] { return sites[1]->call([&] { return received; }); };
  std::this_thread::sleep_for(500ms);
  CHECK(got().empty());  // held behind round 5's frames, which wait for b to begin round 5
  sites[1]->call([&] {
    sites[1]->mesh().decline({5, 0});
    return 0;
  });
  for (int tries = 0; tries < 200 && got().empty(); ++tries) std::this_thread::sleep_for(10ms);
  CHECK(got() == std::vector<std::string>{"a:offer"});
  CHECK(sites[1]->call([&] { return sites[1]->mesh().declined_frames(); }) >= 1);
  // Nothing was refused: the connection stays, and the next round runs over it.
  CHECK(sites[1]->call([&] { return sites[1]->mesh().rejections().size(); }) == 0);
  std::vector<std::vector<float>> ins(2, std::vector<float>(3000, 1.0f)), outs(2, std::vector<float>(3000, 0.0f));
  std::vector<std::future<Result<AllReduceStats>>> round6;
  for (int s = 0; s < 2; ++s) round6.push_back(spawn_round(*sites[s], 6, ins[s], outs[s], 20s));
  for (const auto& r : loopback::wait_all(round6)) REQUIRE(r.ok());
  CHECK(outs[1] == ins[1]);
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
