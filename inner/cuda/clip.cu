#include <cmath>

#include "inner/cuda/clip.cuh"
#include "inner/cuda/kernel_util.cuh"

namespace geoloco::inner::cuda {

namespace {
using detail::global_index;
using detail::grid_stride;

constexpr int kNormThreads = 256;
constexpr std::size_t kNormBlocks = 256;  // at most; fewer for short vectors

/// Sums the block's per-thread doubles in a fixed tree; thread 0 gets the total.
__device__ double block_tree_sum(double* s, double v) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = kNormThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
    __syncthreads();
  }
  return s[0];
}

// First level: block b sums g² over its grid-stride slice, in double.
__global__ void sum_squares_kernel(double* partial, const float* x, std::size_t n) {
  __shared__ double s[kNormThreads];
  double acc = 0.0;
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const double g = static_cast<double>(x[i]);
    acc += g * g;  // no FMA (--fmad=false): a product, then a sum, as the reference
  }
  const double total = block_tree_sum(s, acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Second level: one block adds the partial sums.
__global__ void sum_partials_kernel(double* out, const double* partial, std::size_t count) {
  __shared__ double s[kNormThreads];
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < count; i += kNormThreads) acc += partial[i];
  const double total = block_tree_sum(s, acc);
  if (threadIdx.x == 0) *out = total;
}

__global__ void scale_kernel(float* data, std::size_t n, float factor) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) data[i] *= factor;
}
}  // namespace

Result<double> global_norm(Context& ctx, const float* grads, std::size_t n) {
  if (n == 0) return 0.0;
  std::size_t blocks = (n + kNormThreads - 1) / kNormThreads;
  if (blocks > kNormBlocks) blocks = kNormBlocks;
  auto scratch = ctx.scratch((blocks + 1) * sizeof(double));
  if (!scratch.ok()) return scratch.status();
  double* partial = static_cast<double*>(*scratch);
  double* total = partial + blocks;
  GEOLOCO_LAUNCH(sum_squares_kernel, static_cast<unsigned>(blocks), kNormThreads, ctx.stream(), partial, grads, n);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  GEOLOCO_LAUNCH(sum_partials_kernel, 1, kNormThreads, ctx.stream(), total, partial, blocks);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  double sum = 0.0;
  GEOLOCO_CUDA_CHECK(cudaMemcpyAsync(&sum, total, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream()));
  GEOLOCO_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  return std::sqrt(sum);
}

Result<double> clip_global_norm(Context& ctx, float* grads, std::size_t n, double max_norm) {
  auto norm = global_norm(ctx, grads, n);
  if (!norm.ok()) return norm.status();
  GEOLOCO_RETURN_IF(!std::isfinite(*norm), Err::non_finite, "gradient norm is ", *norm,
                    " (the loss diverged or the data holds non-finite values)");
  if (max_norm > 0.0 && *norm > max_norm) GEOLOCO_TRY(scale(ctx, grads, n, static_cast<float>(max_norm / *norm)));
  return *norm;
}

Status scale(Context& ctx, float* data, std::size_t n, float factor) {
  if (n == 0) return {};
  GEOLOCO_LAUNCH(scale_kernel, detail::blocks_for(n), detail::kThreads, ctx.stream(), data, n, factor);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

}  // namespace geoloco::inner::cuda
