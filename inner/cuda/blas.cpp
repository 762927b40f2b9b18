#include "inner/cuda/blas.h"

namespace geoloco::inner::cuda {

namespace {
cublasComputeType_t compute_type(const Context& ctx) {
  return ctx.tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}
cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }
}  // namespace

Status gemm(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return {};
  // Row-major C = op(A)·op(B)  ⇔  column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B first, n and m swapped.
  GEOLOCO_CUBLAS_CHECK(cublasGemmEx(ctx.blas(), op(trans_b), op(trans_a), n, m, k, &alpha, b, CUDA_R_32F, ldb, a,
                                    CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc, compute_type(ctx),
                                    CUBLAS_GEMM_DEFAULT));
  return {};
}

Status gemm_strided_batched(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                            int lda, long long stride_a, const float* b, int ldb, long long stride_b, float beta,
                            float* c, int ldc, long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return {};
  GEOLOCO_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.blas(), op(trans_b), op(trans_a), n, m, k, &alpha, b, CUDA_R_32F,
                                                  ldb, stride_b, a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F,
                                                  ldc, stride_c, batch, compute_type(ctx), CUBLAS_GEMM_DEFAULT));
  return {};
}

}  // namespace geoloco::inner::cuda
