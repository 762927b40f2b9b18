#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

int device_count(std::string* why_none) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why_none != nullptr)
      *why_none = cat("cudaGetDeviceCount returned ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why_none != nullptr) *why_none = "cudaGetDeviceCount returned cudaSuccess with a count of 0";
  return n;
}

Result<std::unique_ptr<Context>> Context::create(const ContextOptions& options) {
  std::string why;
  const int n = device_count(&why);
  GEOLOCO_RETURN_IF(n == 0, Err::unsupported, "no CUDA device: ", why);
  GEOLOCO_RETURN_IF(options.device < 0 || options.device >= n, Err::invalid_argument, "CUDA device ", options.device,
                    " does not exist (", n, " found)");
  std::unique_ptr<Context> ctx(new Context(options));
  GEOLOCO_CUDA_CHECK(cudaSetDevice(options.device));
  GEOLOCO_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream_, cudaStreamNonBlocking));
  GEOLOCO_CUBLAS_CHECK(cublasCreate(&ctx->blas_));
  GEOLOCO_CUBLAS_CHECK(cublasSetStream(ctx->blas_, ctx->stream_));
  // Scalars (alpha, beta) are passed from the host.
  GEOLOCO_CUBLAS_CHECK(cublasSetPointerMode(ctx->blas_, CUBLAS_POINTER_MODE_HOST));
  return ctx;
}

Context::~Context() {
  // Teardown cannot report: errors here mean the device is already gone.
  if (scratch_ != nullptr) cudaFreeAsync(scratch_, stream_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Result<void*> Context::scratch(std::size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  if (scratch_ != nullptr) GEOLOCO_CUDA_CHECK(cudaFreeAsync(scratch_, stream_));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  // Grow by at least half again, so a slowly growing request does not
  // reallocate every call.
  const std::size_t want = bytes + bytes / 2;
  GEOLOCO_CUDA_CHECK(cudaMallocAsync(&scratch_, want, stream_));
  scratch_bytes_ = want;
  return scratch_;
}

Status Context::synchronize() {
  GEOLOCO_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return {};
}

}  // namespace geoloco::inner::cuda
