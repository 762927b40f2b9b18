// The CUDA emulator against what CUDA specifies: a barrier orders a block's
// threads, a butterfly shuffle gives every lane the warp's sum, 2-D/3-D
// coordinates cover a launch once, bad configurations fail without running,
// faults are sticky (in a forked child, since they end the context), device
// memory is separate from host memory and starts as garbage, cuBLAS GEMMs
// are column-major with its argument checks, TF32 rounds as cvt.rna, and
// NCCL follows the non-blocking protocol, copies with one rank, reduces in
// rank order across processes, and fails (never hangs) when a peer is gone.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "inner/cuda/launch.cuh"

namespace {

__global__ void reverse_kernel(int* out, const int* in) {
  __shared__ int s[256];
  const unsigned t = threadIdx.x;
  s[t] = in[t];
  __syncthreads();
  out[t] = s[blockDim.x - 1 - t];
}

// Reads a neighbour's shared slot with no barrier between the write and the
// read: a race, whose result depends on the order the threads run in.
__global__ void racy_rotate_kernel(int* out, const int* in) {
  __shared__ int s[64];
  const unsigned t = threadIdx.x;
  s[t] = in[t];
  out[t] = s[(t + 1) % blockDim.x];
}

__global__ void rotate_kernel(int* out, const int* in) {
  __shared__ int s[64];
  const unsigned t = threadIdx.x;
  s[t] = in[t];
  __syncthreads();
  out[t] = s[(t + 1) % blockDim.x];
}

__global__ void warp_sum_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

__global__ void coordinates_kernel(unsigned* hits, unsigned* where) {
  const unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned i = bx * blockDim.x * blockDim.y * blockDim.z + tx;
  hits[i] += 1;
  where[i] = (blockIdx.z << 24) | (blockIdx.y << 16) | (blockIdx.x << 8) | (threadIdx.z << 6) | (threadIdx.y << 3) |
             threadIdx.x;
}

__global__ void count_kernel(unsigned long long* total) { atomicAdd(total, 1ull); }

__global__ void early_return_kernel(int* out) {
  if (threadIdx.x >= 16) return;  // half the block leaves before the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}

// Lanes 8..31 leave; 0..7 shuffle with the full mask (allowed: the mask may
// name lanes that have exited) but read lanes 8..15, which take no part.
__global__ void shuffle_from_exited_lane_kernel(float* out) {
  if (threadIdx.x % 32 >= 8) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 8);
}

// Half a warp shuffles among itself while the other half goes on to the
// barrier: valid CUDA, since only the lanes of the mask must take part.
__global__ void half_warp_shuffle_kernel(unsigned* out) {
  unsigned v = threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1);
  __syncthreads();
  out[threadIdx.x] = v;
}

// width 16: lanes 0..15 xor 16 would read a later group (they get their own
// value); lanes 16..31 read the earlier group, which CUDA allows.
__global__ void shuffle_width_kernel(unsigned* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, threadIdx.x, 16, 16);
}

// Every block writes its index to one place: the last block to run wins.
__global__ void last_block_wins_kernel(unsigned* out) {
  if (threadIdx.x == 0) *out = blockIdx.x;
}

template <class T>
T* device_alloc(std::size_t n) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> download(const T* d, std::size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

/// Runs `body` in a forked child (a fault ends the emulated context, as it
/// ends a real one) and returns its exit status: body's return value.
int in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(body());
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("__syncthreads orders a block: every thread reads what another wrote before the barrier", "[emulator]") {
  std::vector<int> in(256);
  for (int i = 0; i < 256; ++i) in[static_cast<std::size_t>(i)] = 1000 + i;
  int* d_in = device_alloc<int>(256);
  int* d_out = device_alloc<int>(256);
  REQUIRE(cudaMemcpy(d_in, in.data(), 256 * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  GEOLOCO_LAUNCH(reverse_kernel, 1, 256, nullptr, d_out, d_in);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto out = download(d_out, 256);
  for (std::size_t i = 0; i < 256; ++i) REQUIRE(out[i] == 1000 + 255 - static_cast<int>(i));
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST_CASE("a race between a block's threads gives different results in the two thread orders; a barrier mends it",
          "[emulator]") {
  namespace emu = geoloco::cuda_emulator;
  std::vector<int> in(64);
  for (int i = 0; i < 64; ++i) in[static_cast<std::size_t>(i)] = 7 * i + 1;
  int* d_in = device_alloc<int>(64);
  int* d_out = device_alloc<int>(64);
  REQUIRE(cudaMemcpy(d_in, in.data(), 64 * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  const emu::ThreadOrder before = emu::thread_order();
  const auto run = [&](emu::ThreadOrder order, bool racy) {
    emu::set_thread_order(order);
    REQUIRE(cudaMemsetAsync(d_out, 0, 64 * sizeof(int), nullptr) == cudaSuccess);
    if (racy) {
      GEOLOCO_LAUNCH(racy_rotate_kernel, 1, 64, nullptr, d_out, d_in);
    } else {
      GEOLOCO_LAUNCH(rotate_kernel, 1, 64, nullptr, d_out, d_in);
    }
    REQUIRE(cudaGetLastError() == cudaSuccess);
    return download(d_out, 64);
  };
  std::vector<int> expected(64);
  for (std::size_t i = 0; i < 64; ++i) expected[i] = in[(i + 1) % 64];
  REQUIRE(run(emu::ThreadOrder::forward, false) == expected);
  REQUIRE(run(emu::ThreadOrder::reverse, false) == expected);
  const auto forward = run(emu::ThreadOrder::forward, true);
  const auto reverse = run(emu::ThreadOrder::reverse, true);
  emu::set_thread_order(before);
  CHECK(forward != reverse);
  CHECK(reverse == expected);  // last to first: each neighbour has written already ...
  CHECK(forward != expected);  // ... thread order: thread t reads slot t + 1 before it is written
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST_CASE("a butterfly of __shfl_xor_sync gives every lane its warp's sum", "[emulator]") {
  float* d = device_alloc<float>(96);
  GEOLOCO_LAUNCH(warp_sum_kernel, 1, 96, nullptr, d);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto out = download(d, 96);
  for (std::size_t i = 0; i < 96; ++i) {
    const std::size_t w = i / 32;  // Σ_{k=32w}^{32w+31} k
    REQUIRE(out[i] == static_cast<float>(32 * 32 * w + 496));
  }
  cudaFree(d);
}

TEST_CASE("shuffles follow CUDA's rules for partial masks and widths", "[emulator]") {
  unsigned* d = device_alloc<unsigned>(32);
  GEOLOCO_LAUNCH(half_warp_shuffle_kernel, 1, 32, nullptr, d);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  auto out = download(d, 32);
  for (unsigned i = 0; i < 32; ++i) REQUIRE(out[i] == (i < 16 ? i ^ 1u : i));
  GEOLOCO_LAUNCH(shuffle_width_kernel, 1, 32, nullptr, d);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  out = download(d, 32);
  for (unsigned i = 0; i < 32; ++i) REQUIRE(out[i] == (i < 16 ? i : i - 16));
  cudaFree(d);
}

TEST_CASE("the reverse order runs blocks last to first too", "[emulator]") {
  namespace emu = geoloco::cuda_emulator;
  unsigned* d = device_alloc<unsigned>(1);
  const emu::ThreadOrder before = emu::thread_order();
  emu::set_thread_order(emu::ThreadOrder::forward);
  GEOLOCO_LAUNCH(last_block_wins_kernel, 5, 32, nullptr, d);
  const unsigned forward = download(d, 1)[0];
  emu::set_thread_order(emu::ThreadOrder::reverse);
  GEOLOCO_LAUNCH(last_block_wins_kernel, 5, 32, nullptr, d);
  const unsigned reverse = download(d, 1)[0];
  emu::set_thread_order(before);
  CHECK(forward == 4);
  CHECK(reverse == 0);
  cudaFree(d);
}

TEST_CASE("a 3-D grid of 3-D blocks runs every thread once with its coordinates", "[emulator]") {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const std::size_t n = 3 * 2 * 2 * 4 * 3 * 2;
  unsigned* hits = device_alloc<unsigned>(n);
  unsigned* where = device_alloc<unsigned>(n);
  REQUIRE(cudaMemsetAsync(hits, 0, n * sizeof(unsigned), nullptr) == cudaSuccess);
  GEOLOCO_LAUNCH(coordinates_kernel, grid, block, nullptr, hits, where);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const auto h = download(hits, n), w = download(where, n);
  std::size_t i = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx, ++i) {
              REQUIRE(h[i] == 1);
              REQUIRE(w[i] == ((bz << 24) | (by << 16) | (bx << 8) | (tz << 6) | (ty << 3) | tx));
            }
  cudaFree(hits);
  cudaFree(where);
}

TEST_CASE("atomicAdd from every thread of many blocks counts each once", "[emulator]") {
  auto* total = device_alloc<unsigned long long>(1);
  REQUIRE(cudaMemsetAsync(total, 0, sizeof(unsigned long long), nullptr) == cudaSuccess);
  GEOLOCO_LAUNCH(count_kernel, 7, 1000, nullptr, total);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(download(total, 1)[0] == 7000);
  cudaFree(total);
}

TEST_CASE("a launch with a bad configuration fails through cudaGetLastError, runs nothing, and is not sticky",
          "[emulator]") {
  auto* total = device_alloc<unsigned long long>(1);
  REQUIRE(cudaMemsetAsync(total, 0, sizeof(unsigned long long), nullptr) == cudaSuccess);
  GEOLOCO_LAUNCH(count_kernel, 1, 2048, nullptr, total);  // over 1024 threads per block
  REQUIRE(cudaGetLastError() == cudaErrorInvalidConfiguration);
  REQUIRE(cudaGetLastError() == cudaSuccess);                        // read once, then cleared
  GEOLOCO_LAUNCH(count_kernel, dim3(1, 70000), 32, nullptr, total);  // grid.y over 65535
  REQUIRE(cudaGetLastError() == cudaErrorInvalidConfiguration);
  GEOLOCO_LAUNCH(count_kernel, 0, 32, nullptr, total);  // an empty grid
  REQUIRE(cudaGetLastError() == cudaErrorInvalidConfiguration);
  REQUIRE(download(total, 1)[0] == 0);
  cudaFree(total);
}

TEST_CASE("device memory starts as NaN bytes and copies refuse the wrong side", "[emulator]") {
  float* d = device_alloc<float>(4);
  const auto fresh = download(d, 4);
  for (float x : fresh) REQUIRE(std::isnan(x));
  std::vector<float> host(4, 1.0f), other(4, 0.0f);
  REQUIRE(cudaMemcpy(d, host.data(), 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);  // reversed
  REQUIRE(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaMemcpy(other.data(), host.data(), 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  REQUIRE(cudaMemcpy(d, host.data(), 20, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // past the end
  REQUIRE(cudaMemcpy(d, host.data(), 16, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(download(d, 4) == host);
  REQUIRE(cudaMemsetAsync(d + 1, 0, 16, nullptr) == cudaErrorInvalidValue);  // runs past the allocation
  cudaPointerAttributes a{};
  REQUIRE(cudaPointerGetAttributes(&a, d + 2) == cudaSuccess);
  REQUIRE(a.type == cudaMemoryTypeDevice);
  REQUIRE(cudaPointerGetAttributes(&a, host.data()) == cudaSuccess);
  REQUIRE(a.type == cudaMemoryTypeUnregistered);
  REQUIRE(cudaFree(host.data()) == cudaErrorInvalidValue);
  REQUIRE(cudaFree(d) == cudaSuccess);
  REQUIRE(cudaFree(d) == cudaErrorInvalidValue);  // twice
  cudaGetLastError();
}

TEST_CASE("a host pointer given to a kernel is a sticky illegal address, as a GPU's fault", "[emulator]") {
  REQUIRE(in_child([] {
            std::vector<float> host(96);
            GEOLOCO_LAUNCH(warp_sum_kernel, 1, 96, nullptr, host.data());
            if (host[5] != 0.0f) return 1;  // the kernel must not have run
            if (cudaGetLastError() != cudaErrorIllegalAddress) return 2;
            if (cudaGetLastError() != cudaErrorIllegalAddress) return 3;  // sticky
            void* p = nullptr;
            if (cudaMalloc(&p, 4) != cudaErrorIllegalAddress) return 4;  // the context is gone
            return 0;
          }) == 0);
}

TEST_CASE(
    "__syncthreads that part of the block returned before, and a shuffle reading a returned lane, fail the launch",
    "[emulator]") {
  REQUIRE(in_child([] {
            int* d = nullptr;
            if (cudaMalloc(reinterpret_cast<void**>(&d), 32 * sizeof(int)) != cudaSuccess) return 1;
            GEOLOCO_LAUNCH(early_return_kernel, 1, 32, nullptr, d);
            return cudaGetLastError() == cudaErrorLaunchFailure ? 0 : 2;
          }) == 0);
  REQUIRE(in_child([] {
            float* d = nullptr;
            if (cudaMalloc(reinterpret_cast<void**>(&d), 32 * sizeof(float)) != cudaSuccess) return 1;
            GEOLOCO_LAUNCH(shuffle_from_exited_lane_kernel, 1, 32, nullptr, d);
            return cudaGetLastError() == cudaErrorLaunchFailure ? 0 : 2;
          }) == 0);
}

namespace {

/// Column-major reference: C = α·op(A)·op(B) + β·C.
void naive_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const std::vector<float>& a, int lda,
                const std::vector<float>& b, int ldb, float beta, std::vector<float>& c, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0.0;
      for (int p = 0; p < k; ++p) {
        const float x = ta ? a[static_cast<std::size_t>(i * lda + p)] : a[static_cast<std::size_t>(p * lda + i)];
        const float y = tb ? b[static_cast<std::size_t>(p * ldb + j)] : b[static_cast<std::size_t>(j * ldb + p)];
        acc += static_cast<double>(x) * y;
      }
      float& out = c[static_cast<std::size_t>(j * ldc + i)];
      out = static_cast<float>(alpha * acc + beta * out);
    }
}

template <class T>
T* upload(const std::vector<T>& host) {
  T* d = device_alloc<T>(host.size());
  REQUIRE(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}

}  // namespace

TEST_CASE("cublasGemmEx is column-major with leading dimensions, for every pair of operations", "[emulator]") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 4, k = 3, pad = 2;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const int lda = (ta ? k : m) + pad, ldb = (tb ? n : k) + pad, ldc = m + pad;
      std::vector<float> a(static_cast<std::size_t>(lda * (ta ? m : k))),
          b(static_cast<std::size_t>(ldb * (tb ? k : n)));
      std::vector<float> c(static_cast<std::size_t>(ldc * n));
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) - 3.0f;
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.5f;
      for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i);
      auto ref = c;
      const float alpha = 2.0f, beta = 0.5f;
      naive_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, ref, ldc);
      float *da = upload(a), *db = upload(b), *dc = upload(c);
      REQUIRE(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, da,
                           CUDA_R_32F, lda, db, CUDA_R_32F, ldb, &beta, dc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(download(dc, c.size()) == ref);  // small integers and halves: exact in any order
      // lda one short of the rows stored is refused, and C is untouched
      REQUIRE(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, da,
                           CUDA_R_32F, ta ? k - 1 : m - 1, db, CUDA_R_32F, ldb, &beta, dc, CUDA_R_32F, ldc,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
      REQUIRE(download(dc, c.size()) == ref);
      cudaFree(da), cudaFree(db), cudaFree(dc);
    }
  {
    std::vector<float> a(1, 1.0f);
    float *da = upload(a), *dc = device_alloc<float>(1);
    const float one = 1.0f;
    REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, da, CUDA_R_32F, 1, da, CUDA_R_32F, 1, &one, dc,
                         CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
    // Host pointer mode with alpha in device memory: the host would read a device address.
    REQUIRE(in_child([&] {
              return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, da, da, CUDA_R_32F, 1, da, CUDA_R_32F, 1, &one,
                                  dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_EXECUTION_FAILED
                         ? 0
                         : 1;
            }) == 0);
    cudaFree(da), cudaFree(dc);
  }
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_CASE("strided batched GEMM multiplies each batch, and TF32 compute rounds inputs to nearest, ties away",
          "[emulator]") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  // Three 1x1 products: a·b for a = 1 + 2^-12 (below half a TF32 step),
  // 1 + 2^-11 (exactly half: away from zero), 1 + 3·2^-12 (above half).
  const std::vector<float> a = {1.0f + std::ldexp(1.0f, -12), 1.0f + std::ldexp(1.0f, -11),
                                1.0f + 3.0f * std::ldexp(1.0f, -12)};
  const std::vector<float> b = {1.0f, 1.0f, 1.0f};
  float *da = upload(a), *db = upload(b), *dc = device_alloc<float>(3);
  const float one = 1.0f, zero = 0.0f;
  const auto product = [&](cublasComputeType_t compute) {
    REQUIRE(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, 1, db, CUDA_R_32F,
                                       1, 1, &zero, dc, CUDA_R_32F, 1, 1, 3, compute,
                                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    return download(dc, 3);
  };
  REQUIRE(product(CUBLAS_COMPUTE_32F) == a);  // β = 0: the NaN garbage in C is not read
  const auto tf32 = product(CUBLAS_COMPUTE_32F_FAST_TF32);
  REQUIRE(tf32[0] == 1.0f);
  REQUIRE(tf32[1] == 1.0f + std::ldexp(1.0f, -10));
  REQUIRE(tf32[2] == 1.0f + std::ldexp(1.0f, -10));
  // A host pointer where cuBLAS reads device memory: the GPU would fault.
  REQUIRE(in_child([&] {
            std::vector<float> host(1, 2.0f);
            const cublasStatus_t s =
                cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, host.data(), CUDA_R_32F, 1, db, CUDA_R_32F, 1,
                             &zero, dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            return s == CUBLAS_STATUS_EXECUTION_FAILED && cudaGetLastError() == cudaErrorIllegalAddress ? 0 : 1;
          }) == 0);
  cudaFree(da), cudaFree(db), cudaFree(dc);
  cublasDestroy(h);
}

TEST_CASE("one-rank NCCL: non-blocking init reports in-progress first, collectives copy", "[emulator]") {
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  REQUIRE(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInProgress);
  ncclResult_t state = ncclSuccess;
  REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  REQUIRE(state == ncclInProgress);
  REQUIRE(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  REQUIRE(state == ncclSuccess);

  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  float *send = upload(values), *recv = device_alloc<float>(3);
  REQUIRE(ncclAllReduce(send, recv, 3, ncclFloat, ncclAvg, comm, nullptr) == ncclSuccess);
  REQUIRE(download(recv, 3) == values);
  REQUIRE(ncclBroadcast(send, send, 3, ncclFloat, 0, comm, nullptr) == ncclSuccess);
  REQUIRE(download(send, 3) == values);
  REQUIRE(ncclBroadcast(send, recv, 3, ncclFloat, 1, comm, nullptr) == ncclInvalidArgument);
  std::vector<float> host(3);
  REQUIRE(ncclAllReduce(host.data(), host.data(), 3, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  REQUIRE(ncclCommFinalize(comm) == ncclSuccess);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
  REQUIRE(ncclAllReduce(send, recv, 3, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);

  cudaFree(send), cudaFree(recv);
}

namespace {

/// Runs body(rank) in `n` forked processes; true when every one returns 0.
bool ranks_succeed(int n, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body(r));
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ok = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
  }
  return ok;
}

}  // namespace

TEST_CASE("NCCL groups of several processes: all-reduce in rank order, broadcast from any root", "[emulator]") {
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  // 3 ranks; over 1 MiB, so a collective takes several chunks of the shared segment.
  const std::size_t n = (std::size_t{1} << 18) + 5;
  REQUIRE(ranks_succeed(3, [&](int rank) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRankConfig(&comm, 3, id, rank, nullptr) != ncclSuccess) return 1;
    std::vector<float> mine(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<float>(rank + 1) * 0.1f + static_cast<float>(i % 97);
    float* d = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&d), n * sizeof(float)) != cudaSuccess) return 2;
    cudaMemcpy(d, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    if (ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) return 3;
    std::vector<float> got(n);
    cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (std::size_t i = 0; i < n; ++i) {
      const float base = static_cast<float>(i % 97);
      const float expected = ((0.1f + base) + (0.2f + base)) + (0.3f + base);  // rank order, on every rank
      if (std::memcmp(&got[i], &expected, sizeof(float)) != 0) return 4;
    }
    // Broadcast from rank 2: its values everywhere.
    for (std::size_t i = 0; i < n; ++i) mine[i] = rank == 2 ? static_cast<float>(i) : -1.0f;
    cudaMemcpy(d, mine.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    if (ncclBroadcast(d, d, n, ncclFloat, 2, comm, nullptr) != ncclSuccess) return 5;
    cudaMemcpy(got.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (std::size_t i = 0; i < n; ++i)
      if (got[i] != static_cast<float>(i)) return 6;
    ncclResult_t state = ncclInProgress;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclSuccess) return 7;
    if (ncclCommFinalize(comm) != ncclSuccess || ncclCommDestroy(comm) != ncclSuccess) return 8;
    return 0;
  }));
}

TEST_CASE("an NCCL group whose peer aborts, or never comes, fails with ncclRemoteError instead of hanging",
          "[emulator]") {
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  REQUIRE(ranks_succeed(2, [&](int rank) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRankConfig(&comm, 2, id, rank, nullptr) != ncclSuccess) return 1;
    float* d = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(float)) != cudaSuccess) return 2;
    if (rank == 1) return ncclCommAbort(comm) == ncclSuccess ? 0 : 3;  // leaves without the all-reduce
    if (ncclAllReduce(d, d, 4, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) return 4;  // enqueued ...
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return 5;
    return state == ncclRemoteError ? 0 : 6;  // ... and failed: the peer is gone
  }));
  // Rank 1 of a group of 2 never starts: rank 0's init gives up at the wait limit.
  ncclUniqueId lonely{};
  REQUIRE(ncclGetUniqueId(&lonely) == ncclSuccess);
  REQUIRE(ranks_succeed(1, [&](int) {
    setenv("GEOLOCO_CUDA_EMULATOR_NCCL_TIMEOUT_MS", "200", 1);
    ncclComm_t comm = nullptr;
    return ncclCommInitRankConfig(&comm, 2, lonely, 0, nullptr) == ncclRemoteError ? 0 : 1;
  }));
}
