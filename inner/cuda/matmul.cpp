#include "inner/cuda/matmul.h"

#include "inner/cuda/blas.h"

namespace geoloco::inner::cuda {

namespace {
int I(std::size_t v) { return static_cast<int>(v); }
}  // namespace

Status matmul_forward(Context& ctx, float* out, const float* in, const float* w, std::size_t n, std::size_t k,
                      std::size_t m) {
  return gemm(ctx, false, false, I(n), I(m), I(k), 1.0f, in, I(k), w, I(m), 0.0f, out, I(m));
}

Status matmul_backward(Context& ctx, float* d_in, float* d_w, const float* d_out, const float* in, const float* w,
                       std::size_t n, std::size_t k, std::size_t m) {
  // d_in[n,k] += d_out[n,m] · w[k,m]ᵀ   (beta = 1: accumulate, as the CPU reference)
  if (d_in != nullptr)
    GEOLOCO_TRY(gemm(ctx, false, true, I(n), I(k), I(m), 1.0f, d_out, I(m), w, I(m), 1.0f, d_in, I(k)));
  // d_w[k,m] += in[n,k]ᵀ · d_out[n,m]
  return gemm(ctx, true, false, I(k), I(m), I(n), 1.0f, in, I(k), d_out, I(m), 1.0f, d_w, I(m));
}

Status matmul_nt_forward(Context& ctx, float* out, const float* in, const float* w, std::size_t n, std::size_t k,
                         std::size_t m) {
  return gemm(ctx, false, true, I(n), I(m), I(k), 1.0f, in, I(k), w, I(k), 0.0f, out, I(m));
}

Status matmul_nt_backward(Context& ctx, float* d_in, float* d_w, const float* d_out, const float* in, const float* w,
                          std::size_t n, std::size_t k, std::size_t m) {
  // d_in[n,k] += d_out[n,m] · w[m,k]
  if (d_in != nullptr)
    GEOLOCO_TRY(gemm(ctx, false, false, I(n), I(k), I(m), 1.0f, d_out, I(m), w, I(k), 1.0f, d_in, I(k)));
  // d_w[m,k] += d_out[n,m]ᵀ · in[n,k]
  return gemm(ctx, true, false, I(m), I(k), I(n), 1.0f, d_out, I(m), in, I(k), 1.0f, d_w, I(k));
}

}  // namespace geoloco::inner::cuda
