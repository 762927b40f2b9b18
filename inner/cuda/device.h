// The CUDA backend's handle on one GPU: a Context owns the device's stream,
// its cuBLAS handle and a growable scratch buffer; DeviceBuffer<T> owns one
// allocation. Every op in inner/cuda/ takes a Context and enqueues its work
// on ctx.stream(), so ops run in call order without host synchronization;
// only functions that return a value to the host (a loss, a count) wait.
//
// This is not a model or a trainer: it knows nothing about layouts.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "inner/cuda/check.h"

namespace geoloco::inner::cuda {

/// How many CUDA devices this process can use. A machine without a GPU or
/// without a driver is not an error here: it answers 0 and says why in
/// `why_none`, naming cudaGetDeviceCount's result, e.g. "cudaGetDeviceCount
/// returned cudaErrorNoDevice (no CUDA-capable device is detected)" (the
/// tests' visible skip message, geoloco-train --backend cuda's refusal).
int device_count(std::string* why_none = nullptr);

struct ContextOptions {
  int device = 0;  ///< CUDA device ordinal, in [0, device_count())
  /// TF32 tensor cores for the fp32 matrix products. OFF by default: TF32
  /// rounds the inputs to 10 mantissa bits, so results drift from the CPU
  /// reference by ~1e-3 relative; the backend test checks fp32 tightly and
  /// TF32 only by NMSE. The benchmark reports both.
  bool tf32 = false;
};

class Context {
 public:
  /// Selects the device, creates a non-blocking stream and a cuBLAS handle
  /// bound to it. Errors: invalid_argument (device out of range),
  /// unsupported (no device or driver), io.
  static Result<std::unique_ptr<Context>> create(const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return options_.device; }
  bool tf32() const { return options_.tf32; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t blas() const { return blas_; }

  /// Switches the matrix products between fp32 and TF32 from the next call.
  void set_tf32(bool on) { options_.tf32 = on; }

  /// At least `bytes` of device memory, valid until the next scratch() call.
  /// Grows (never shrinks) with stream-ordered allocation, so freeing the old
  /// buffer waits for the kernels already queued on it. Ops use it for their
  /// temporaries; it is never held across two ops.
  Result<void*> scratch(std::size_t bytes);

  /// Waits for everything queued on the stream. Errors: io (an earlier
  /// kernel failed, reported here because launches are asynchronous).
  Status synchronize();

 private:
  explicit Context(const ContextOptions& options) : options_(options) {}

  ContextOptions options_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
};

/// One device allocation of `size()` values of T. Move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = o.data_, size_ = o.size_;
      o.data_ = nullptr, o.size_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Allocates `n` values (contents undefined). Errors: io (out of memory).
  Status allocate(std::size_t n) {
    reset();
    if (n == 0) return {};
    void* p = nullptr;
    GEOLOCO_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    data_ = static_cast<T*>(p);
    size_ = n;
    return {};
  }
  /// (Re)allocates to host.size() and copies `host` in, ordered on `stream`
  /// (a plain cudaMemcpy would be ordered only on the legacy default stream,
  /// which a non-blocking stream does not wait for); returns when the copy is
  /// done, so `host` may go away.
  Status assign(std::span<const T> host, cudaStream_t stream) {
    if (host.size() != size_) GEOLOCO_TRY(allocate(host.size()));
    if (host.empty()) return {};
    GEOLOCO_CUDA_CHECK(cudaMemcpyAsync(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream));
    GEOLOCO_CUDA_CHECK(cudaStreamSynchronize(stream));
    return {};
  }
  /// Copies the whole buffer to `host` (which must hold size() values), after
  /// the work queued on `stream`.
  Status copy_to(std::span<T> host, cudaStream_t stream) const {
    GEOLOCO_RETURN_IF(host.size() != size_, Err::invalid_argument, "device buffer holds ", size_,
                      " values, the host span ", host.size());
    if (size_ == 0) return {};
    GEOLOCO_CUDA_CHECK(cudaMemcpyAsync(host.data(), data_, host.size_bytes(), cudaMemcpyDeviceToHost, stream));
    GEOLOCO_CUDA_CHECK(cudaStreamSynchronize(stream));
    return {};
  }
  /// Sets every byte to 0 on `stream`.
  Status zero(cudaStream_t stream) {
    if (size_ > 0) GEOLOCO_CUDA_CHECK(cudaMemsetAsync(data_, 0, size_ * sizeof(T), stream));
    return {};
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void reset() {
    if (data_ != nullptr) cudaFree(data_);  // a failed free at teardown has no one to report to
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace geoloco::inner::cuda
