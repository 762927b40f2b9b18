// A site's I/O threads: an io_context run by a few threads, on whose strands
// the mesh's connections encrypt, decrypt, hash and move bytes, so that one
// site uses several cores for its links (TransportOptions::io_threads).
//
// Lifetime: create before the Mesh that uses executor(), stop the mesh, then
// join() (it returns once the connections' handlers have ended), then destroy
// the mesh, then this.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <optional>
#include <thread>
#include <vector>

namespace geoloco::transport {

class IoThreads {
 public:
  /// Starts `threads` threads (at least 1).
  explicit IoThreads(int threads);
  ~IoThreads();
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;

  asio::any_io_executor executor() { return io_.get_executor(); }
  int threads() const { return threads_; }
  /// Lets the threads finish the work that is left and waits for them.
  void join();
  /// Stops every thread where it is, leaving sockets open (tests freeze a
  /// site as a crashed host would); resume() starts them again.
  void pause();
  void resume();

 private:
  void run_threads();

  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::vector<std::thread> running_;
  int threads_;
};

}  // namespace geoloco::transport
