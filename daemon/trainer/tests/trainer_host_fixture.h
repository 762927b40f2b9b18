// What the TrainerHost tests share: a fresh socket path, the sync client's
// options, and a log of what a trainer thread was welcomed with.
#pragma once

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <vector>

#include "daemon/trainer/tests/run_on.h"
#include "daemon/trainer/trainer_host.h"
#include "inner/protocol/client.h"

using namespace geoloco;
using namespace geoloco::daemon;
using namespace std::chrono_literals;
namespace protocol = geoloco::inner::protocol;
using geoloco::daemon::test::eventually;  // from run_on.h

namespace geoloco::daemon::test {

inline std::string socket_path() {
  static int n = 0;
  return "/tmp/geoloco-trainer-host-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".sock";
}

inline TensorDesc tensor(std::string name, std::vector<std::uint64_t> shape, std::uint64_t offset) {
  TensorDesc t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.offset = offset;
  return t;
}

// w [2, 3] then b [3]: 9 values; two fragments cut at the tensor boundary (6).
inline Layout layout() { return {tensor("w", {2, 3}, 0), tensor("b", {3}, 6)}; }
// The same sizes with w transposed: a trainer built for another model.
inline Layout wrong_layout() { return {tensor("w", {3, 2}, 0), tensor("b", {3}, 6)}; }

inline protocol::ClientOptions client_options() {
  protocol::ClientOptions o;
  o.connect_timeout_ms = 10'000;
  o.welcome_timeout_ms = 20'000;
  return o;
}

inline std::vector<float> plus(std::span<const float> v, float d) {
  std::vector<float> out(v.begin(), v.end());
  for (float& x : out) x += d;
  return out;
}

// On the engine's io_context: returns once `flag` is set (by a trainer thread).
inline asio::awaitable<void> until(const std::atomic<bool>& flag) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  while (!flag) {
    t.expires_after(20ms);
    co_await t.async_wait(asio::use_awaitable);
  }
}
inline bool wait_flag(const std::atomic<bool>& flag) {
  for (int i = 0; i < 2000 && !flag; ++i) std::this_thread::sleep_for(10ms);
  return flag;
}

// One external trainer's view, filled on its thread and checked on the main one.
struct TrainerLog {
  Status status;
  bool anchor_ready = false;
  std::vector<float> welcomed;              // the segment right after WELCOME (or after INIT's RESULT)
  std::vector<std::uint64_t> next_rounds;   // per fragment, after WELCOME
  std::vector<std::vector<float>> anchors;  // the segment after each round's RESULTs
  bool stopped = false;
};

// Trains `rounds` rounds: adds 1 to every value, syncs every fragment (with
// the timing {r + 1, 2r + 2} s), waits for the RESULTs.
inline Status train(protocol::Client& c, int rounds, TrainerLog& log) {
  for (int r = 0; r < rounds && !c.stopped(); ++r) {
    for (float& x : c.parameters()) x += 1.0f;
    const auto fragments = static_cast<std::uint32_t>(c.fragments().size());
    for (std::uint32_t f = 0; f < fragments; ++f)
      GEOLOCO_TRY(c.sync(c.next_round(f), f, 100 + f, 2.0 + f, protocol::SyncTiming{r + 1.0, 2.0 * r + 2.0}));
    for (std::uint32_t f = 0; f < fragments; ++f) {
      auto result = c.wait_result(20'000);
      if (!result.ok()) return result.status();
    }
    log.anchors.emplace_back(c.parameters().begin(), c.parameters().end());
  }
  log.stopped = c.stopped();
  return {};
}

inline void record_welcome(protocol::Client& c, TrainerLog& log) {
  log.anchor_ready = c.anchor_ready();
  log.welcomed.assign(c.parameters().begin(), c.parameters().end());
  for (std::uint32_t f = 0; f < c.fragments().size(); ++f) log.next_rounds.push_back(c.next_round(f));
}

inline Result<std::unique_ptr<TrainerHost>> open_host(asio::io_context& io, TrainerHostOptions o) {
  o.socket_path = socket_path();
  o.job = "job-a";
  return TrainerHost::open(io.get_executor(), std::move(o));
}

// --- engines --------------------------------------------------------------

}  // namespace geoloco::daemon::test
