#include "inner/cpu/layernorm.h"  // kLayerNormEpsilon: one constant for both backends
#include "inner/cuda/kernel_util.cuh"
#include "inner/cuda/layernorm.cuh"

namespace geoloco::inner::cuda {

namespace {
using detail::warp_sum;

constexpr int kWarpsPerBlock = 8;

__device__ inline std::size_t warp_row() {
  return static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* in, const float* w,
                                         const float* b, std::size_t n, std::size_t c) {
  const std::size_t row = warp_row();
  const unsigned lane = threadIdx.x % 32;
  if (row >= n) return;  // the whole warp leaves together, so the shuffles below see 32 lanes
  const float* x = in + row * c;
  float s = 0.0f;
  for (std::size_t j = lane; j < c; j += 32) s += x[j];
  const float m = warp_sum(s) / static_cast<float>(c);
  float v = 0.0f;  // two passes, as the reference: (x − mean)², not E[x²] − mean²
  for (std::size_t j = lane; j < c; j += 32) v += (x[j] - m) * (x[j] - m);
  v = warp_sum(v) / static_cast<float>(c);
  const float r = 1.0f / sqrtf(v + cpu::kLayerNormEpsilon);
  float* y = out + row * c;
  for (std::size_t j = lane; j < c; j += 32) y[j] = (x[j] - m) * r * w[j] + b[j];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_in_kernel(float* d_in, const float* d_out, const float* in, const float* w,
                                             const float* mean, const float* rstd, std::size_t n, std::size_t c) {
  const std::size_t row = warp_row();
  const unsigned lane = threadIdx.x % 32;
  if (row >= n) return;
  const float* x = in + row * c;
  const float* dy = d_out + row * c;
  float* dx = d_in + row * c;
  const float m = mean[row], r = rstd[row];
  // With x̂ = (x − mean)·rstd and g = dy·w:  dx = rstd · (g − mean(g) − x̂ · mean(g · x̂))
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (std::size_t j = lane; j < c; j += 32) {
    const float xhat = (x[j] - m) * r;
    const float g = dy[j] * w[j];
    g_sum += g;
    gx_sum += g * xhat;
  }
  const float g_mean = warp_sum(g_sum) / static_cast<float>(c);
  const float gx_mean = warp_sum(gx_sum) / static_cast<float>(c);
  for (std::size_t j = lane; j < c; j += 32) {
    const float xhat = (x[j] - m) * r;
    const float g = dy[j] * w[j];
    dx[j] += r * (g - g_mean - xhat * gx_mean);
  }
}

// d_w[j] = Σ_i dy[i,j] · x̂[i,j]
struct WeightGrad {
  const float* d_out;
  const float* in;
  const float* mean;
  const float* rstd;
  std::size_t c;
  __device__ float operator()(std::size_t i, std::size_t j) const {
    const float xhat = (in[i * c + j] - mean[i]) * rstd[i];
    return d_out[i * c + j] * xhat;
  }
};

// d_b[j] = Σ_i dy[i,j]
struct BiasGrad {
  const float* d_out;
  std::size_t c;
  __device__ float operator()(std::size_t i, std::size_t j) const { return d_out[i * c + j]; }
};

unsigned row_blocks(std::size_t n) { return static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock); }
}  // namespace

Status layernorm_forward(Context& ctx, float* out, float* mean, float* rstd, const float* in, const float* w,
                         const float* b, std::size_t n, std::size_t c) {
  if (n == 0 || c == 0) return {};
  GEOLOCO_LAUNCH(layernorm_forward_kernel, row_blocks(n), kWarpsPerBlock * 32, ctx.stream(), out, mean, rstd, in, w, b,
                 n, c);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status layernorm_backward(Context& ctx, float* d_in, float* d_w, float* d_b, const float* d_out, const float* in,
                          const float* w, const float* mean, const float* rstd, std::size_t n, std::size_t c) {
  if (n == 0 || c == 0) return {};
  GEOLOCO_LAUNCH(layernorm_backward_in_kernel, row_blocks(n), kWarpsPerBlock * 32, ctx.stream(), d_in, d_out, in, w,
                 mean, rstd, n, c);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  GEOLOCO_TRY(detail::column_sum(ctx, d_w, n, c, WeightGrad{d_out, in, mean, rstd, c}));
  return detail::column_sum(ctx, d_b, n, c, BiasGrad{d_out, c});
}

}  // namespace geoloco::inner::cuda
