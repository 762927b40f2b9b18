// Control frames travel outside any operation, in order, to the handler;
// without a handler, or for another job, they are refused.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "transport/loopback.h"

using namespace geoloco;
using namespace geoloco::transport;
using namespace std::chrono_literals;

TEST_CASE("control frames reach the peer's handler in order, outside any all-reduce") {
  auto federation = loopback::Federation::create({"a", "b"});
  REQUIRE(federation.ok());
  auto made = loopback::make_sites(**federation, {"a", "b"}, loopback::test_options());
  REQUIRE(made.ok());
  auto& sites = *made;
  std::vector<std::string> received;  // touched on b's thread only
  sites[1]->call([&] {
    sites[1]->mesh().set_control_handler([&](const std::string& peer, const FrameHeader& h, Buffer payload) {
      received.push_back(cat(peer, ":", h.round, ":", std::string(reinterpret_cast<const char*>(payload.data()), payload.size())));
      return Status();
    });
    return 0;
  });
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
