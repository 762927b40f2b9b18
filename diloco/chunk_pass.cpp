#include "diloco/chunk_pass.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <exception>
#include <new>
#include <system_error>
#include <thread>

#include "common/cpu_time.h"

namespace geoloco::diloco {

Result<std::uint64_t> ChunkList::covered() const {
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    GEOLOCO_RETURN_IF(ranges[i].begin != next, Err::invalid_argument, "chunk ", i, " of Δ starts at value ",
                      ranges[i].begin, ", where the values from ", next, " are expected");
    next += ranges[i].size;
  }
  return next;
}

namespace {

// The chunks' turn to run in_order, and the first error in chunk order.
class Turns {
 public:
  void wait_for(std::size_t i) {
    std::unique_lock lock(mutex_);
    turned_.wait(lock, [&] { return turn_ == i; });
  }
  // Called by the thread whose turn it is.
  void pass(const Status& status) {
    if (!status.ok() && !failed_.load()) {
      error_ = status;
      failed_.store(true);
    }
    {
      std::lock_guard lock(mutex_);
      ++turn_;
    }
    turned_.notify_all();
  }
  bool failed() const { return failed_.load(); }
  const Status& error() const { return error_; }

 private:
  std::mutex mutex_;
  std::condition_variable turned_;
  std::size_t turn_ = 0;
  std::atomic<bool> failed_{false};
  Status error_;  // written by the thread whose turn it is, read after every thread ended
};

}  // namespace

Status run_chunk_pass(const ChunkList& delta, const PassThreads& threads, const ChunkWork& work,
                      const ChunkInOrder& in_order) {
  GEOLOCO_TRY(delta.covered().status());
  const std::size_t count = delta.ranges.size();
  if (count == 0) return {};
  std::atomic<std::size_t> next{0};
  Turns turns;
  // Whatever a callback throws becomes the chunk's error: a thread must
  // always pass its turn, or the threads after it wait for ever.
  auto caught = [](std::size_t i) {
    try {
      throw;
    } catch (const std::bad_alloc&) {
      return Status(Err::internal, cat("out of memory in a pass over Δ, at chunk ", i));
    } catch (const std::exception& e) {
      return Status(Err::internal, cat("a pass over Δ, at chunk ", i, ": ", e.what()));
    } catch (...) {
      return Status(Err::internal, cat("a pass over Δ, at chunk ", i, ": an unknown exception"));
    }
  };
  auto run = [&] {
    ChunkDecoder decode;
    std::vector<float> values, scratch;
    Status made;
    try {
      decode = delta.decoder();
      if (!decode) made = Status(Err::internal, "a pass over Δ was given no decoder");
    } catch (...) {
      made = caught(0);
    }
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= count) return;
      const Range range = delta.ranges[i];
      Status status = made;
      std::span<const float> out;
      if (status.ok() && threads.cancel && threads.cancel->load())
        status = Status(Err::io, cat("the pass over Δ was given up at chunk ", i, " of ", count));
      // A chunk after a failure is not decoded: its turn only passes.
      if (status.ok() && !turns.failed()) {
        try {
          values.resize(range.size);
          status = decode(i, values);
          if (status.ok() && work) {
            auto done = work(i, range.begin, values, scratch);
            if (done.ok()) out = *done;
            else status = done.status();
          } else if (status.ok()) {
            out = values;
          }
        } catch (...) {
          status = caught(i);
        }
      }
      turns.wait_for(i);
      if (status.ok() && !turns.failed() && in_order) {
        try {
          status = in_order(i, range.begin, out);
        } catch (...) {
          status = caught(i);
        }
      }
      turns.pass(status);
    }
  };
  const unsigned helpers = static_cast<unsigned>(std::min<std::size_t>(std::max(threads.count, 1u), count)) - 1;
  std::vector<std::thread> pool;
  std::vector<double> helper_cpu(helpers, 0.0);
  pool.reserve(helpers);
  for (unsigned t = 0; t < helpers; ++t) {
    try {
      pool.emplace_back([&, t] {
        ThreadCpuTimer timer(helper_cpu[t]);
        run();
      });
    } catch (const std::system_error&) {
      break;  // no thread to be had: the pass runs on those it has
    }
  }
  run();
  for (auto& t : pool) t.join();
  if (threads.helper_cpu_seconds)
    for (double s : helper_cpu) *threads.helper_cpu_seconds += s;
  return turns.failed() ? turns.error() : Status();
}

unsigned default_pass_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp(cores, 1u, 8u);
}

}  // namespace geoloco::diloco
