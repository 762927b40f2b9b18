// Device-side helpers shared by the kernels of inner/cuda/ (included by .cu
// files only): launch sizes, warp reductions, and a deterministic column sum.
//
// Determinism: no kernel here uses floating-point atomics. Every sum has an
// order fixed by the launch configuration, which depends only on the sizes,
// so the same inputs give the same bits in every run and on every rank of a
// data-parallel group (which then all-reduce identical-shaped gradients).
#pragma once

#include <cstddef>

#include "inner/cuda/device.h"
#include "inner/cuda/launch.cuh"

namespace geoloco::inner::cuda::detail {

inline constexpr int kThreads = 256;
inline constexpr unsigned kFullMask = 0xffffffffu;

/// Blocks for a grid-stride loop over n items: enough to fill the GPU, capped
/// so the grid stays valid for any n (the loop covers the rest).
inline unsigned blocks_for(std::size_t n, int threads = kThreads) {
  const std::size_t b = (n + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  return b > (std::size_t{1} << 20) ? (1u << 20) : static_cast<unsigned>(b);
}

/// Index of this thread in a 1-D grid-stride loop, and the stride.
__device__ inline std::size_t global_index() { return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

/// Butterfly (xor) reductions: every lane ends with the same bits, because
/// each step adds the same two values on both partner lanes (a+b == b+a).
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(kFullMask, v, o);
    v = other > v ? other : v;
  }
  return v;
}

/// Block-wide sum and max (blockDim.x a multiple of 32, at most 1024); every
/// thread gets the same bits: each warp reduces, then every warp reduces the
/// per-warp results in the same butterfly order.
__device__ inline float block_sum(float v) {
  __shared__ float partial[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : 0.0f);
}
__device__ inline float block_max(float v) {
  __shared__ float partial[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? partial[lane] : partial[0]);
}

/// First pass of column_sum: block (x, y) sums rows [y·rows_per_chunk, …) of
/// 32 columns; thread (tx, ty) takes rows ty, ty+8, … of column tx (reads
/// along a row are coalesced), then the 8 partial sums are added in ty order.
template <class Value>
__global__ void column_partials_kernel(float* partial, std::size_t n, std::size_t m, std::size_t rows_per_chunk,
                                       Value value) {
  __shared__ float s[8][33];  // 33: no bank conflicts on the transposed read
  const std::size_t j = static_cast<std::size_t>(blockIdx.x) * 32 + threadIdx.x;
  const std::size_t begin = static_cast<std::size_t>(blockIdx.y) * rows_per_chunk;
  const std::size_t end = begin + rows_per_chunk < n ? begin + rows_per_chunk : n;
  float acc = 0.0f;
  if (j < m)
    for (std::size_t i = begin + threadIdx.y; i < end; i += 8) acc += value(i, j);
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < m) {
    float t = s[0][threadIdx.x];
    for (int y = 1; y < 8; ++y) t += s[y][threadIdx.x];
    partial[static_cast<std::size_t>(blockIdx.y) * m + j] = t;
  }
}

/// Second pass: out[j] += Σ_chunks partial[chunk, j], chunks in order. (A
/// template so each .cu gets its own copy without separable compilation.)
template <class T>
__global__ void column_finish_kernel(T* out, const T* partial, std::size_t chunks, std::size_t m) {
  for (std::size_t j = global_index(); j < m; j += grid_stride()) {
    T t = partial[j];
    for (std::size_t c = 1; c < chunks; ++c) t += partial[c * m + j];
    out[j] += t;
  }
}

/// out[j] += Σ_{i<n} value(i, j) for j < m (value: a __device__ functor).
/// Two passes over row chunks instead of one block per column, so a tall
/// matrix (65536 rows × 768) still spreads over every SM; the chunking
/// depends on n only, hence a fixed summation order. Uses ctx.scratch().
template <class Value>
Status column_sum(Context& ctx, float* out, std::size_t n, std::size_t m, Value value) {
  if (n == 0 || m == 0) return {};
  std::size_t chunks = (n + 63) / 64;
  if (chunks > 256) chunks = 256;
  const std::size_t rows_per_chunk = (n + chunks - 1) / chunks;
  auto scratch = ctx.scratch(chunks * m * sizeof(float));
  if (!scratch.ok()) return scratch.status();
  float* partial = static_cast<float*>(*scratch);
  const dim3 grid(static_cast<unsigned>((m + 31) / 32), static_cast<unsigned>(chunks));
  GEOLOCO_LAUNCH(column_partials_kernel, grid, dim3(32, 8), ctx.stream(), partial, n, m, rows_per_chunk, value);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  GEOLOCO_LAUNCH(column_finish_kernel<float>, blocks_for(m), kThreads, ctx.stream(), out, partial, chunks, m);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

}  // namespace geoloco::inner::cuda::detail
