// Small coroutine primitives for a single-threaded io_context: a Signal
// (wake every waiter; waiters re-check their condition) and an AsyncMutex
// built on it. No thread safety: all users run on one executor.
#pragma once

#include <asio/experimental/as_tuple.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <cstdint>

namespace geoloco {

class Signal {
 public:
  explicit Signal(const asio::any_io_executor& ex) : timer_(ex, asio::steady_timer::time_point::max()) {}
  /// Returns at the next notify_all() (or when the executor stops).
  asio::awaitable<void> wait() { co_await timer_.async_wait(asio::experimental::as_tuple(asio::use_awaitable)); }
  void notify_all() { timer_.cancel(); }

 private:
  asio::steady_timer timer_;
};

/// Taken in the order lock() was called (a ticket each): on a strand of a
/// thread pool, the wake-ups of a Signal's waiters may run in any order,
/// and a connection's writes must go out in the order they were asked
/// for (a goodbye after every frame asked for before it).
class AsyncMutex {
 public:
  explicit AsyncMutex(const asio::any_io_executor& ex) : released_(ex) {}
  asio::awaitable<void> lock() {
    const std::uint64_t ticket = next_ticket_++;
    while (locked_ || ticket != serving_) co_await released_.wait();
    locked_ = true;
  }
  void unlock() {
    locked_ = false;
    ++serving_;
    released_.notify_all();
  }

 private:
  bool locked_ = false;
  std::uint64_t next_ticket_ = 0;
  std::uint64_t serving_ = 0;
  Signal released_;
};

}  // namespace geoloco
