#include "transport/io_threads.h"

#include <algorithm>

#include "common/thread_name.h"

namespace geoloco::transport {

IoThreads::IoThreads(int threads) : threads_(std::max(1, threads)) {
  work_.emplace(io_.get_executor());
  run_threads();
}

IoThreads::~IoThreads() {
  work_.reset();
  pause();
}

void IoThreads::run_threads() {
  for (int i = 0; i < threads_; ++i)
    running_.emplace_back([this] {
      name_this_thread("geoloco-io");
      io_.run();
    });
}

void IoThreads::join() {
  work_.reset();
  for (auto& t : running_) t.join();
  running_.clear();
}

void IoThreads::pause() {
  io_.stop();
  for (auto& t : running_) t.join();
  running_.clear();
}

void IoThreads::resume() {
  if (!running_.empty()) return;
  io_.restart();
  run_threads();
}

}  // namespace geoloco::transport
