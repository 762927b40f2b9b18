// CHECK macros for the CUDA runtime, cuBLAS and NCCL: a failed call becomes a
// geoloco::Status that names the call, the library's own error text and the
// file:line, and is RETURNED to the caller. Nothing here exits: the trainer
// is supervised by the daemon, and only main() decides to stop.
//
// Code mapping: "no device / driver too old" is `unsupported` (the machine
// cannot run this backend); every other failure is `io` (the device refused
// a call), so callers branch on two cases and users read the message.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common/status.h"

namespace geoloco::inner::cuda {

Status cuda_status(cudaError_t code, const char* call, const char* file, int line);
Status cublas_status(cublasStatus_t code, const char* call, const char* file, int line);
Status nccl_status(ncclResult_t code, const char* call, const char* file, int line);

}  // namespace geoloco::inner::cuda

/// Returns a Status from the enclosing function when the CUDA runtime call fails.
#define GEOLOCO_CUDA_CHECK(call)                                                                 \
  do {                                                                                           \
    const cudaError_t geoloco_cuda_code_ = (call);                                               \
    if (geoloco_cuda_code_ != cudaSuccess)                                                       \
      return ::geoloco::inner::cuda::cuda_status(geoloco_cuda_code_, #call, __FILE__, __LINE__); \
  } while (0)

/// The same for a kernel launch: launch errors (bad configuration) surface
/// through cudaGetLastError, not through the launch expression.
#define GEOLOCO_CUDA_CHECK_LAUNCH() GEOLOCO_CUDA_CHECK(cudaGetLastError())

#define GEOLOCO_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                               \
    const cublasStatus_t geoloco_cublas_code_ = (call);                                              \
    if (geoloco_cublas_code_ != CUBLAS_STATUS_SUCCESS)                                               \
      return ::geoloco::inner::cuda::cublas_status(geoloco_cublas_code_, #call, __FILE__, __LINE__); \
  } while (0)

#define GEOLOCO_NCCL_CHECK(call)                                                                 \
  do {                                                                                           \
    const ncclResult_t geoloco_nccl_code_ = (call);                                              \
    if (geoloco_nccl_code_ != ncclSuccess)                                                       \
      return ::geoloco::inner::cuda::nccl_status(geoloco_nccl_code_, #call, __FILE__, __LINE__); \
  } while (0)
