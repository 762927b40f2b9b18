#include "daemon/control_outbox.h"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

namespace geoloco::daemon {

std::shared_ptr<ControlOutbox> ControlOutbox::create(asio::any_io_executor executor, transport::Mesh& mesh,
                                                     std::string label, OutboxOptions options) {
  return std::shared_ptr<ControlOutbox>(new ControlOutbox(std::move(executor), mesh, std::move(label), options));
}

ControlOutbox::ControlOutbox(asio::any_io_executor executor, transport::Mesh& mesh, std::string label,
                             OutboxOptions options)
    : executor_(std::move(executor)), mesh_(mesh), label_(std::move(label)), options_(options) {}

void ControlOutbox::send(const std::string& peer, const transport::FrameHeader& header, std::string payload) {
  auto& q = queues_[peer];
  if (!q.frames.empty() && q.frames.size() >= options_.max_queued) {  // a long-dead peer: keep the newest
    q.frames.pop_front();
    ++dropped_;
  }
  q.frames.emplace_back(header, std::move(payload));
  if (!q.draining) {
    q.draining = true;
    asio::co_spawn(
        executor_, [keep = shared_from_this(), peer] { return keep->drain(peer); }, asio::detached);
  }
}

void ControlOutbox::send_now(const std::string& peer, const transport::FrameHeader& header, std::string payload,
                             bool log_loss) {
  asio::co_spawn(
      executor_,
      [keep = shared_from_this(), peer, header, payload = std::move(payload), log_loss]() -> asio::awaitable<void> {
        Status sent = co_await keep->mesh_.send_control_frame(peer, header, std::as_bytes(std::span(payload)));
        if (!sent.ok()) {
          ++keep->lost_;
          if (log_loss) spdlog::info("[{}] a message to {} was lost: {}", keep->label_, peer, sent.message());
        }
      },
      asio::detached);
}

void ControlOutbox::link_up(const std::string& peer) {
  auto it = queues_.find(peer);
  if (it != queues_.end() && it->second.pause) it->second.pause->cancel();
}

std::size_t ControlOutbox::queued(const std::string& peer) const {
  auto it = queues_.find(peer);
  return it == queues_.end() ? 0 : it->second.frames.size();
}

asio::awaitable<void> ControlOutbox::drain(std::string peer) {
  auto& q = queues_[peer];
  while (!q.frames.empty()) {
    auto [header, payload] = std::move(q.frames.front());
    q.frames.pop_front();
    Status sent;
    for (int k = 1; k <= options_.tries; ++k) {
      sent = co_await mesh_.send_control_frame(peer, header, std::as_bytes(std::span(payload)));
      if (sent.ok() || k == options_.tries) break;
      asio::steady_timer pause(executor_, options_.pause * k);
      q.pause = &pause;
      co_await pause.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
      q.pause = nullptr;
    }
    if (!sent.ok()) {
      ++lost_;
      spdlog::debug("[{}] a control message to {} was lost: {}", label_, peer, sent.message());
    }
  }
  q.draining = false;
}

}  // namespace geoloco::daemon
