// Test helpers: run one test coroutine on an io_context with a time limit,
// and poll a condition from inside a coroutine. The engine side of every test
// is a named coroutine function (never a capturing lambda: its captures would
// die with the temporary lambda while the coroutine still runs).
#pragma once

#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <exception>
#include <functional>

#include <catch2/catch.hpp>

namespace geoloco::daemon::test {

/// Runs `test` on `io` until it returns, rethrowing what it threw (a failed
/// REQUIRE), or fails the test after `limit`.
inline void run_on(asio::io_context& io, asio::awaitable<void> test, std::chrono::milliseconds limit) {
  bool done = false;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(test), [&](std::exception_ptr e) {
    error = e;
    done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(20));
  }
  if (error) std::rethrow_exception(error);
  INFO("the test coroutine did not finish within " << limit.count() << " ms");
  REQUIRE(done);
}

/// Polls `condition` every 5 ms; false if it does not hold within `limit`.
inline asio::awaitable<bool> eventually(std::function<bool()> condition, std::chrono::milliseconds limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) co_return false;
    timer.expires_after(std::chrono::milliseconds(5));
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
  co_return true;
}

}  // namespace geoloco::daemon::test
