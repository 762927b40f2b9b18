// The one door to cuBLAS, mirroring inner/cpu/blas.h: row-major gemm (and a
// strided-batched one for attention's per-head products) with the same
// argument meaning as cpu::gemm, so a CUDA op reads like its CPU reference.
//
// cuBLAS is column-major. A row-major matrix is its transpose in column-major
// memory, so C = op(A)·op(B) (row-major) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ
// (column-major): the operands swap places and m/n swap, no data moves.
//
// Precision: fp32 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F) unless the
// Context asks for TF32 (CUBLAS_COMPUTE_32F_FAST_TF32), see ContextOptions.
#pragma once

#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

/// C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C, row-major, device
/// pointers; lda/ldb/ldc are row strides in floats. Errors: io.
Status gemm(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc);

/// `batch` independent gemms; matrix i starts at a + i·stride_a (and so on).
Status gemm_strided_batched(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                            int lda, long long stride_a, const float* b, int ldb, long long stride_b, float beta,
                            float* c, int ldc, long long stride_c, int batch);

}  // namespace geoloco::inner::cuda
