// Work too long for an event loop, run beside it: the caller's coroutine
// waits without holding its thread, so the loop goes on serving timers and
// messages, and resumes on its own executor with the result (or the
// exception) once the work is done.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/thread_pool.hpp>
#include <asio/use_awaitable.hpp>
#include <type_traits>

namespace geoloco {

/// Runs f() on one of `pool`'s threads. f must not touch what the loop may
/// change meanwhile; the caller keeps f's captures alive (it waits).
template <class F>
asio::awaitable<std::invoke_result_t<F&>> off_loop(asio::thread_pool& pool, F f) {
  using R = std::invoke_result_t<F&>;
  co_return co_await asio::co_spawn(
      pool.get_executor(), [&f]() -> asio::awaitable<R> { co_return f(); }, asio::use_awaitable);
}

}  // namespace geoloco
