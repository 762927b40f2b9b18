// The CUDA kernel language for the host compiler, as the CUDA emulator runs
// it (inner/cuda/emulator/README.md): the qualifiers, the built-in
// coordinates, __syncthreads, the warp shuffle, atomicAdd, and the launch
// behind GEOLOCO_LAUNCH (inner/cuda/launch.cuh).
//
// A kernel runs one block at a time, one fiber per thread of the block.
// Fibers switch only at __syncthreads and at warp shuffles, so a block's
// threads interleave exactly where CUDA requires them to agree, and code
// between two such points is never interrupted (which makes atomicAdd a
// plain read-modify-write here). `__shared__` variables are per-OS-thread
// statics: one block runs at a time on a thread, so its threads share them.
#pragma once

#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __restrict__ __restrict

namespace geoloco::cuda_emulator {

/// The running thread's place in its launch.
struct Coordinates {
  uint3 thread;
  uint3 block;
  dim3 block_dim;
  dim3 grid_dim;
};
const Coordinates& coordinates();

/// This thread's lane in its warp: its linear index in the block mod 32.
unsigned lane_id();

/// __syncthreads(): waits until every thread of the block has arrived.
void sync_block();

/// One warp shuffle: this lane offers `mine`, waits until every lane in
/// `mask` has offered, and gets `source_lane`'s offer.
std::uint64_t warp_exchange(unsigned mask, std::uint64_t mine, unsigned source_lane);

/// The order in which blocks run, and a block's threads between two
/// barriers: first to last, or last to first. A GPU promises neither, so a
/// kernel must give the same result in both. The default comes from the environment
/// (GEOLOCO_CUDA_EMULATOR_ORDER=reverse); tests may change it.
enum class ThreadOrder { forward, reverse };
ThreadOrder thread_order();
void set_thread_order(ThreadOrder order);

/// Runs `body(context)` once per thread of every block (GEOLOCO_LAUNCH).
/// `pointers` are the launch's arguments that are pointers (null for the
/// others); each non-null one must point into device memory.
void launch_kernel(const char* name, dim3 grid, dim3 block, cudaStream_t stream, void (*body)(void*), void* context,
                   const void* const* pointers, std::size_t count);

template <class Arg>
const void* pointer_argument(const Arg& arg) {
  if constexpr (std::is_pointer_v<Arg>) {
    return static_cast<const void*>(arg);
  } else {
    return nullptr;
  }
}

/// Marks the running kernel as doing what CUDA leaves undefined: the launch
/// fails (sticky) with `what` once the block has run.
void undefined(const char* what);

/// GEOLOCO_LAUNCH: the arguments are evaluated once, as by <<<...>>>, and
/// every thread calls the kernel with its own copies of them.
template <class Body, class... Args>
void launch(const char* name, dim3 grid, dim3 block, cudaStream_t stream, Body body, const Args&... args) {
  std::tuple<std::decay_t<Args>...> values(args...);
  const void* pointers[sizeof...(Args) + 1] = {pointer_argument(args)...};
  struct Call {
    Body* body;
    std::tuple<std::decay_t<Args>...>* values;
    static void run(void* c) { std::apply(*static_cast<Call*>(c)->body, *static_cast<Call*>(c)->values); }
  } call{&body, &values};
  launch_kernel(name, grid, block, stream, &Call::run, static_cast<void*>(&call), pointers, sizeof...(Args));
}

}  // namespace geoloco::cuda_emulator

#define threadIdx (::geoloco::cuda_emulator::coordinates().thread)
#define blockIdx (::geoloco::cuda_emulator::coordinates().block)
#define blockDim (::geoloco::cuda_emulator::coordinates().block_dim)
#define gridDim (::geoloco::cuda_emulator::coordinates().grid_dim)
inline constexpr int warpSize = 32;

inline void __syncthreads() { ::geoloco::cuda_emulator::sync_block(); }

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "a shuffle moves one value of up to 8 bytes");
  const unsigned lane = ::geoloco::cuda_emulator::lane_id();
  const auto w = static_cast<unsigned>(width);
  if (w == 0 || w > 32 || (w & (w - 1)) != 0)
    ::geoloco::cuda_emulator::undefined("a shuffle's width is not a power of 2 up to 32");
  // In groups of `width` lanes, as CUDA: a lane may read an earlier group, but
  // a partner in a later group gives the lane its own value.
  unsigned source = (lane ^ static_cast<unsigned>(lane_mask)) % 32;
  if (w != 0 && source / w > lane / w) source = lane;
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = ::geoloco::cuda_emulator::warp_exchange(mask, bits, source);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

template <class T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
