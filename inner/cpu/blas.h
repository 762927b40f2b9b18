// The one door to OpenBLAS: a row-major sgemm wrapper and the thread count.
// Every matrix product of the CPU backend goes through gemm(), so a
// reproducibility or performance question has one place to look.
#pragma once

namespace geoloco::inner::cpu {

/// C[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · C, row-major, where
/// op(X) is X or its transpose. lda/ldb/ldc are row strides in floats, so
/// a head's slice of a wider activation can be used in place.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);

/// Sets OpenBLAS's thread count. With one thread sgemm's summation order is
/// fixed, which the tests and the data-parallel equivalence rely on; with
/// more, OpenBLAS still partitions the output (not the sum), but we do not
/// promise it.
void set_blas_threads(int threads);
int blas_threads();

}  // namespace geoloco::inner::cpu
