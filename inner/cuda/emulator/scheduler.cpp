// The kernel launcher of the CUDA emulator: each block runs as one fiber per
// thread, switched only at __syncthreads and warp shuffles.
//
// Fibers are fiber.h's (no system call per switch). A block's fibers run
// in thread order until each has ended or waits. Then the lanes at a
// shuffle whose mask's live lanes all wait there are released (their values
// exchanged), or else, when every live thread waits at __syncthreads, the
// block is. Anything else is a kernel that would hang or misbehave on a GPU,
// and it fails the launch with a message saying what was seen:
//   * __syncthreads that some threads of the block never reach (they
//     returned, or wait at a shuffle);
//   * a shuffle that leaves its own lane out of the mask, reads a lane that
//     does not take part, or waits for lanes of its mask that never come.
// GEOLOCO_CUDA_EMULATOR_ORDER=reverse runs the blocks, and each phase's
// threads, last to first, to expose kernels whose result depends on the
// order (races).
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common/status.h"
#include "cuda_runtime.h"
#include "inner/cuda/emulator/fiber.h"
#include "inner/cuda/emulator/state.h"

namespace geoloco::cuda_emulator {

namespace {

constexpr unsigned kMaxThreads = 1024;
// Small stacks keep a block's fibers within few pages (switching among a
// thousand of them is what the emulator spends its time on); a kernel's
// frames are small. AddressSanitizer's frames are several times larger.
#if defined(GEOLOCO_EMULATOR_ASAN)
constexpr std::size_t kStackBytes = 128 * 1024;
#else
constexpr std::size_t kStackBytes = 16 * 1024;
#endif

enum class Wait : std::uint8_t { none, block, warp, done };

struct Thread {
  Fiber fiber;
  Wait wait = Wait::none;
  uint3 index{};  // threadIdx
  // At a shuffle: its mask, the lane it reads, the value it offers; after
  // the release, the value it got.
  unsigned mask = 0, source = 0;
  std::uint64_t offer = 0, got = 0;
};

/// One OS thread's block runner, made on its first launch and kept: the
/// fiber stacks (with a guard page under each) are mapped once.
class BlockRunner {
 public:
  BlockRunner() {
    page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    slot_ = kStackBytes + page_;
    void* p =
        mmap(nullptr, slot_ * kMaxThreads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return;
    stacks_ = static_cast<char*>(p);
    for (unsigned i = 0; i < kMaxThreads; ++i) mprotect(stacks_ + i * slot_, page_, PROT_NONE);
  }
  ~BlockRunner() {
    if (stacks_ != nullptr) munmap(stacks_, slot_ * kMaxThreads);
  }
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  bool ready() const { return stacks_ != nullptr; }
  /// Runs the threads of each phase in reverse order (GEOLOCO_CUDA_EMULATOR_ORDER=reverse).
  void set_reverse(bool reverse) { reverse_ = reverse; }

  /// Runs block `block` of a launch; an empty string when every thread ended.
  std::string run(const char* name, uint3 block, dim3 block_dim, dim3 grid_dim, void (*body)(void*), void* context);

  unsigned lane() const { return current_ % 32; }
  const Coordinates& coordinates() const { return coordinates_; }
  void sync_block();
  void undefined(const char* what) {
    if (failure_.empty()) failure_ = what;
  }
  std::uint64_t exchange(unsigned mask, std::uint64_t mine, unsigned source_lane);

 private:
  [[noreturn]] static void fiber_main();
  void switch_to(unsigned i);
  void yield(Wait wait);
  std::string release_warps(bool& released);
  std::string release_block(bool& released);

  char* stacks_ = nullptr;
  std::size_t page_ = 0, slot_ = 0;
  std::array<Thread, kMaxThreads> fibers_{};
  Fiber scheduler_;
  unsigned count_ = 0, current_ = 0;
  bool reverse_ = false;
  Coordinates coordinates_{};
  void (*body_)(void*) = nullptr;
  void* context_ = nullptr;
  std::string failure_;
};

thread_local BlockRunner* t_running = nullptr;  // the runner whose block this OS thread is running

/// This OS thread's runner, made on its first launch (on the heap: it holds
/// a thousand fiber contexts, too much for every thread's static TLS).
BlockRunner& runner() {
  thread_local std::unique_ptr<BlockRunner> r;
  if (!r) r = std::make_unique<BlockRunner>();
  return *r;
}

void BlockRunner::fiber_main() {
  BlockRunner& r = *t_running;
  Fiber::started(r.scheduler_);
  r.body_(r.context_);
  Thread& self = r.fibers_[r.current_];
  self.wait = Wait::done;
  r.scheduler_.finish_from(self.fiber);  // never resumed: the next block prepares the fiber afresh
  __builtin_unreachable();
}

void BlockRunner::switch_to(unsigned i) {
  current_ = i;
  coordinates_.thread = fibers_[i].index;
  fibers_[i].fiber.resume_from(scheduler_);
}

void BlockRunner::yield(Wait wait) {
  fibers_[current_].wait = wait;
  scheduler_.resume_from(fibers_[current_].fiber);
}

std::string BlockRunner::run(const char* name, uint3 block, dim3 block_dim, dim3 grid_dim, void (*body)(void*),
                             void* context) {
  count_ = block_dim.x * block_dim.y * block_dim.z;
  coordinates_ = Coordinates{uint3{0, 0, 0}, block, block_dim, grid_dim};
  body_ = body;
  context_ = context;
  failure_.clear();
  unsigned i = 0;  // linear thread index: x fastest, as CUDA numbers a block's threads (and warps)
  for (unsigned z = 0; z < block_dim.z; ++z)
    for (unsigned y = 0; y < block_dim.y; ++y)
      for (unsigned x = 0; x < block_dim.x; ++x, ++i) {
        Thread& f = fibers_[i];
        // Each stack's top a different number of cache lines below its slot's
        // end: tops 16 KiB apart would all fall in the same cache sets.
        f.fiber.prepare(stacks_ + i * slot_ + page_, kStackBytes - (i % 61) * 64, &BlockRunner::fiber_main);
        f.wait = Wait::none;
        f.mask = 0;
        f.index = uint3{x, y, z};
      }
  for (;;) {
    for (unsigned k = 0; k < count_; ++k) {
      const unsigned i = reverse_ ? count_ - 1 - k : k;
      if (fibers_[i].wait == Wait::none) switch_to(i);
    }
    bool released = false;
    std::string why = release_warps(released);
    if (why.empty() && !released) why = release_block(released);
    if (why.empty() && !released) why = failure_;  // every thread ended: did one do something undefined?
    if (!why.empty()) return cat("kernel ", name, ", block (", block.x, ", ", block.y, ", ", block.z, "): ", why);
    if (!released) return {};
  }
}

// CUDA's rule for __shfl_*_sync: the calling lane is in `mask`, every
// non-exited lane named in `mask` executes the same shuffle with the same
// mask, and a lane may read only a lane that takes part in it. A waiting
// lane is released once every live lane of its mask waits at a shuffle too
// (with one mask, the whole group is released together); it then gets its
// source's offer, taken while the source still waits, so no value can be
// overwritten before it is read.
std::string BlockRunner::release_warps(bool& released) {
  for (unsigned w = 0; w * 32 < count_; ++w) {
    const unsigned first = w * 32, last = first + 32 < count_ ? first + 32 : count_;
    unsigned waiting = 0, live = 0;
    for (unsigned i = first; i < last; ++i) {
      live |= fibers_[i].wait != Wait::done ? 1u << (i - first) : 0u;
      waiting |= fibers_[i].wait == Wait::warp ? 1u << (i - first) : 0u;
    }
    if (waiting == 0) continue;
    unsigned ready = 0;
    for (unsigned i = first; i < last; ++i) {
      const Thread& t = fibers_[i];
      if (t.wait != Wait::warp) continue;
      const unsigned lane = i - first;
      if ((t.mask & (1u << lane)) == 0)
        return cat("lane ", lane, " of warp ", w, " shuffles with a mask (0x", std::hex, t.mask,
                   ") that leaves itself out");
      if ((t.mask & live & ~waiting) != 0) continue;  // a lane it names is still on its way
      for (unsigned j = first; j < last; ++j)
        if (((t.mask & waiting) >> (j - first)) & 1u && fibers_[j].mask != t.mask)
          return cat("lanes ", lane, " and ", j - first, " of warp ", w, " shuffle with different masks (0x", std::hex,
                     t.mask, ", 0x", fibers_[j].mask, "): undefined on a GPU");
      if ((t.mask & waiting & (1u << t.source)) == 0)
        return cat("lane ", lane, " of warp ", w, " reads lane ", t.source, ", which ",
                   (t.mask & (1u << t.source)) == 0 ? "its mask leaves out"
                   : (live & (1u << t.source)) == 0 ? "has returned or does not exist"
                                                    : "is not at this shuffle",
                   ": undefined on a GPU");
      ready |= 1u << lane;
    }
    if (ready == 0) continue;
    for (unsigned i = first; i < last; ++i)
      if ((ready >> (i - first)) & 1u) fibers_[i].got = fibers_[first + fibers_[i].source].offer;
    for (unsigned i = first; i < last; ++i)
      if ((ready >> (i - first)) & 1u) fibers_[i].wait = Wait::none;
    released = true;
  }
  return {};
}

std::string BlockRunner::release_block(bool& released) {
  unsigned live = 0, at_barrier = 0, at_shuffle = 0;
  for (unsigned i = 0; i < count_; ++i) {
    live += fibers_[i].wait != Wait::done;
    at_barrier += fibers_[i].wait == Wait::block;
    at_shuffle += fibers_[i].wait == Wait::warp;
  }
  if (live == 0) return {};
  if (at_barrier == 0)
    return cat(at_shuffle, " threads wait at a warp shuffle for lanes of their mask that never reach it");
  if (at_barrier != live)
    return cat(at_barrier, " threads wait at __syncthreads while ", at_shuffle,
               " wait at a warp shuffle: the block would hang");
  if (live != count_)
    return cat("__syncthreads is reached by ", live, " of the block's ", count_,
               " threads (the others returned): undefined on a GPU");
  for (unsigned i = 0; i < count_; ++i) fibers_[i].wait = Wait::none;
  released = true;
  return {};
}

void BlockRunner::sync_block() { yield(Wait::block); }

std::uint64_t BlockRunner::exchange(unsigned mask, std::uint64_t mine, unsigned source_lane) {
  Thread& t = fibers_[current_];
  t.mask = mask;
  t.source = source_lane % 32;
  t.offer = mine;
  yield(Wait::warp);
  return t.got;  // set by release_warps
}

std::atomic<ThreadOrder>& order_setting() {
  static std::atomic<ThreadOrder> order{[] {
    const char* env = std::getenv("GEOLOCO_CUDA_EMULATOR_ORDER");
    return env != nullptr && std::strcmp(env, "reverse") == 0 ? ThreadOrder::reverse : ThreadOrder::forward;
  }()};
  return order;
}

bool valid_configuration(dim3 grid, dim3 block) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  return threads >= 1 && threads <= kMaxThreads && block.x <= 1024 && block.y <= 1024 && block.z <= 64 && grid.x >= 1 &&
         grid.x <= 0x7fffffffu && grid.y >= 1 && grid.y <= 65535 && grid.z >= 1 && grid.z <= 65535;
}

}  // namespace

ThreadOrder thread_order() { return order_setting().load(); }
void set_thread_order(ThreadOrder order) { order_setting().store(order); }

const Coordinates& coordinates() { return t_running->coordinates(); }
unsigned lane_id() { return t_running->lane(); }
void sync_block() { t_running->sync_block(); }
void undefined(const char* what) { t_running->undefined(what); }
std::uint64_t warp_exchange(unsigned mask, std::uint64_t mine, unsigned source_lane) {
  return t_running->exchange(mask, mine, source_lane);
}

void launch_kernel(const char* name, dim3 grid, dim3 block, cudaStream_t stream, void (*body)(void*), void* context,
                   const void* const* pointers, std::size_t count) {
  if (sticky_error() != cudaSuccess) return;  // cudaGetLastError answers the fault
  if (!is_stream(stream)) {
    fail(cudaErrorInvalidResourceHandle, cat("kernel ", name, ": launched on ", stream, ", not a live stream"));
    return;
  }
  if (!valid_configuration(grid, block)) {
    fail(cudaErrorInvalidConfiguration,
         cat("kernel ", name, ": grid (", grid.x, ", ", grid.y, ", ", grid.z, ") of blocks (", block.x, ", ", block.y,
             ", ", block.z, ") is not a valid launch"));
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (pointers[i] != nullptr && !is_device(pointers[i], 0)) {
      fault(cudaErrorIllegalAddress, cat("kernel ", name, ": argument ", i + 1, " (", pointers[i],
                                         ") is not device memory; a GPU would fault on it"));
      return;
    }
  }
  if (t_running != nullptr) {
    fault(cudaErrorLaunchFailure, cat("kernel ", name, ": launched from inside a kernel, which is not emulated"));
    return;
  }
  BlockRunner& r = runner();
  if (!r.ready()) {
    fail(cudaErrorMemoryAllocation, cat("kernel ", name, ": cannot map the emulator's fiber stacks"));
    return;
  }
  // Between two barriers a GPU runs a block's threads in no promised order.
  // The emulator runs them in thread order, or in reverse when asked, so a
  // kernel whose result depends on that order (a race through shared or
  // global memory) gives different results in the two runs of the tests.
  const bool reverse = thread_order() == ThreadOrder::reverse;
  r.set_reverse(reverse);
  t_running = &r;
  std::string failure;
  // Blocks run one after another, last to first too in reverse order (a GPU
  // promises no order among blocks either).
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  for (unsigned long long k = 0; k < blocks && failure.empty(); ++k) {
    const unsigned long long b = reverse ? blocks - 1 - k : k;
    const uint3 at{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                   static_cast<unsigned>(b / (1ull * grid.x * grid.y))};
    failure = r.run(name, at, block, grid, body, context);
  }
  t_running = nullptr;
  if (!failure.empty()) fault(cudaErrorLaunchFailure, failure);
}

}  // namespace geoloco::cuda_emulator
