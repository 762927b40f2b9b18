// The accept loop of geoloco's local servers (the control socket, the
// metrics endpoint): each accepted connection is served on its own
// coroutine; a failed accept (out of descriptors, EMFILE; out of memory) is
// counted and waited out with common/backoff.h instead of retried at once.
#pragma once

#include <asio/experimental/as_tuple.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <cstdint>
#include <utility>

#include "common/backoff.h"

namespace geoloco {

/// Accepts on `acceptor` until `open` turns false or the acceptor is closed,
/// spawning `serve(socket)` (an awaitable) for each connection.
template <class Acceptor, class Serve>
asio::awaitable<void> accept_until_closed(Acceptor& acceptor, const bool& open, std::atomic<std::uint64_t>& errors,
                                          Serve serve) {
  asio::steady_timer pause(acceptor.get_executor());
  unsigned failures = 0;
  while (open) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) {
      if (!open || ec == asio::error::operation_aborted) break;
      // The connection waits in the backlog; retrying at once would spin a
      // core for as long as the condition lasts.
      ++errors;
      pause.expires_after(accept_backoff(++failures));
      co_await pause.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
      continue;
    }
    failures = 0;
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
  }
}

}  // namespace geoloco
