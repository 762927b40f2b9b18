#include "inner/cuda/check.h"

namespace geoloco::inner::cuda {

Status cuda_status(cudaError_t code, const char* call, const char* file, int line) {
  const bool no_device = code == cudaErrorNoDevice || code == cudaErrorInsufficientDriver;
  return Status(no_device ? Err::unsupported : Err::io,
                cat("CUDA: ", call, " failed: ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")"), file,
                line);
}

Status cublas_status(cublasStatus_t code, const char* call, const char* file, int line) {
  return Status(Err::io,
                cat("cuBLAS: ", call, " failed: ", cublasGetStatusName(code), " (", cublasGetStatusString(code), ")"),
                file, line);
}

Status nccl_status(ncclResult_t code, const char* call, const char* file, int line) {
  return Status(Err::io, cat("NCCL: ", call, " failed: ", ncclGetErrorString(code)), file, line);
}

}  // namespace geoloco::inner::cuda
