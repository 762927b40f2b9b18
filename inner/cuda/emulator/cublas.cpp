// cuBLAS of the CUDA emulator (include/cublas_v2.h): the GEMMs run as
// OpenBLAS's column-major sgemm on the host, after the checks cuBLAS makes
// (handle, operations, sizes, leading dimensions, types) and the one a GPU
// makes by faulting: every matrix must lie in device memory.
#include <cblas.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/status.h"
#include "cublas_v2.h"
#include "inner/cuda/emulator/state.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
};

namespace emu = geoloco::cuda_emulator;
using geoloco::cat;

namespace {

emu::LiveSet<cublasContext>& handles() {
  static emu::LiveSet<cublasContext> h;
  return h;
}

bool live(cublasHandle_t handle) { return handles().contains(handle); }

cublasStatus_t refuse(cublasStatus_t status, const std::string& why) {
  emu::report(why);
  return status;
}

/// Bytes spanned by a column-major rows × cols matrix with leading dimension ld.
std::size_t extent(long long rows, long long cols, long long ld) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<std::size_t>((cols - 1) * ld + rows) * sizeof(float);
}

/// What the tensor cores keep of an fp32 input in TF32 mode: 10 mantissa
/// bits, rounded to nearest with ties away from zero (cvt.rna.tf32.f32).
float to_tf32(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, sizeof(u));
  return x;
}

struct Gemm {
  cublasOperation_t transa, transb;
  int m, n, k;
  const float *a, *b;
  float* c;
  int lda, ldb, ldc;
  bool tf32;
};

/// Checks and runs one product; `what` names the call in messages.
cublasStatus_t run(cublasHandle_t handle, const Gemm& g, const void* alpha_p, const void* beta_p, const char* what) {
  const bool a_plain = g.transa == CUBLAS_OP_N, b_plain = g.transb == CUBLAS_OP_N;
  const long long a_rows = a_plain ? g.m : g.k, a_cols = a_plain ? g.k : g.m;
  const long long b_rows = b_plain ? g.k : g.n, b_cols = b_plain ? g.n : g.k;
  if (g.k > 0 &&
      (!emu::is_device(g.a, extent(a_rows, a_cols, g.lda)) || !emu::is_device(g.b, extent(b_rows, b_cols, g.ldb)))) {
    emu::fault(cudaErrorIllegalAddress, cat(what, ": A or B is not within device memory"));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (!emu::is_device(g.c, extent(g.m, g.n, g.ldc))) {
    emu::fault(cudaErrorIllegalAddress, cat(what, ": C is not within device memory"));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  // The scalars live where the pointer mode says: in host mode a device
  // pointer would be dereferenced by the host, in device mode a host pointer
  // by the GPU; either faults on a real machine.
  const bool device_mode = handle->mode == CUBLAS_POINTER_MODE_DEVICE;
  if (emu::is_device(alpha_p, sizeof(float)) != device_mode || emu::is_device(beta_p, sizeof(float)) != device_mode) {
    emu::fault(cudaErrorIllegalAddress,
               cat(what, ": alpha and beta must be ", device_mode ? "device" : "host", " memory in this pointer mode"));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  float alpha, beta;
  std::memcpy(&alpha, alpha_p, sizeof(float));
  std::memcpy(&beta, beta_p, sizeof(float));
  const float* a = g.a;
  const float* b = g.b;
  std::vector<float> a_tf32, b_tf32;
  if (g.tf32 && g.k > 0) {
    a_tf32.assign(g.a, g.a + extent(a_rows, a_cols, g.lda) / sizeof(float));
    b_tf32.assign(g.b, g.b + extent(b_rows, b_cols, g.ldb) / sizeof(float));
    for (float& x : a_tf32) x = to_tf32(x);
    for (float& x : b_tf32) x = to_tf32(x);
    a = a_tf32.data(), b = b_tf32.data();
  }
  cblas_sgemm(CblasColMajor, a_plain ? CblasNoTrans : CblasTrans, b_plain ? CblasNoTrans : CblasTrans, g.m, g.n, g.k,
              alpha, a, g.lda < 1 ? 1 : g.lda, b, g.ldb < 1 ? 1 : g.ldb, beta, g.c, g.ldc);
  return CUBLAS_STATUS_SUCCESS;
}

/// cuBLAS's argument checks, in its order: handle, operations, sizes,
/// leading dimensions, then what the emulator supports.
cublasStatus_t check(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                     const void* alpha, const void* beta, int lda, int ldb, int ldc, int batch, cudaDataType at,
                     cudaDataType bt, cudaDataType ct, cublasComputeType_t compute, const char* what) {
  if (!live(handle)) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, cat(what, ": not a live handle"));
  const auto valid_op = [](cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
  };
  if (!valid_op(transa) || !valid_op(transb)) return refuse(CUBLAS_STATUS_INVALID_VALUE, cat(what, ": bad operation"));
  if (m < 0 || n < 0 || k < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, cat(what, ": negative size m ", m, " n ", n, " k ", k));
  const int a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
  const auto at_least = [](int rows) { return rows > 1 ? rows : 1; };
  if (lda < at_least(a_rows) || ldb < at_least(b_rows) || ldc < at_least(m))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, cat(what, ": leading dimensions lda ", lda, " ldb ", ldb, " ldc ", ldc,
                                                   " below the rows stored (", a_rows, ", ", b_rows, ", ", m, ")"));
  if (batch < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, cat(what, ": batchCount ", batch));
  if (alpha == nullptr || beta == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, cat(what, ": null alpha or beta"));
  if (at != CUDA_R_32F || bt != CUDA_R_32F || ct != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  cat(what, ": only fp32 data with 32F or 32F_FAST_TF32 compute is emulated"));
  if (emu::sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (emu::sticky_error() != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = handles().add(new cublasContext);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  return handles().destroy(handle) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!emu::is_stream(stream)) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream: not a live stream");
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  handle->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
  }
  return "unknown status";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  const cublasStatus_t s = check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc, 1, Atype, Btype, Ctype,
                                 computeType, "cublasGemmEx");
  if (s != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) return s;
  const Gemm g{transa,
               transb,
               m,
               n,
               k,
               static_cast<const float*>(A),
               static_cast<const float*>(B),
               static_cast<float*>(C),
               lda,
               ldb,
               ldc,
               computeType == CUBLAS_COMPUTE_32F_FAST_TF32};
  return run(handle, g, alpha, beta, "cublasGemmEx");
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  const cublasStatus_t s = check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc, batchCount, Atype, Btype,
                                 Ctype, computeType, "cublasGemmStridedBatchedEx");
  if (s != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) return s;
  for (int i = 0; i < batchCount; ++i) {
    const Gemm g{transa,
                 transb,
                 m,
                 n,
                 k,
                 static_cast<const float*>(A) + i * strideA,
                 static_cast<const float*>(B) + i * strideB,
                 static_cast<float*>(C) + i * strideC,
                 lda,
                 ldb,
                 ldc,
                 computeType == CUBLAS_COMPUTE_32F_FAST_TF32};
    if (const cublasStatus_t r = run(handle, g, alpha, beta, "cublasGemmStridedBatchedEx"); r != CUBLAS_STATUS_SUCCESS)
      return r;
  }
  return CUBLAS_STATUS_SUCCESS;
}
