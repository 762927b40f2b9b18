#include "inner/cuda/cross_entropy.cuh"
#include "inner/cuda/kernel_util.cuh"

namespace geoloco::inner::cuda {

namespace {
using detail::block_max;
using detail::block_sum;
using detail::global_index;
using detail::grid_stride;

constexpr int kRowThreads = 256;    // one block per row of logits
constexpr int kMeanThreads = 1024;  // the single block that averages the row losses

__global__ void cross_entropy_forward_kernel(float* probs, double* row_loss, const float* logits,
                                             const std::int32_t* targets, std::size_t v) {
  const std::size_t row = blockIdx.x;
  const float* z = logits + row * v;
  float* p = probs + row * v;
  float max = z[0];
  for (std::size_t j = threadIdx.x; j < v; j += blockDim.x) max = z[j] > max ? z[j] : max;
  max = block_max(max);
  float sum = 0.0f;
  for (std::size_t j = threadIdx.x; j < v; j += blockDim.x) {
    p[j] = expf(z[j] - max);
    sum += p[j];
  }
  sum = block_sum(sum);
  const float inv = 1.0f / sum;
  for (std::size_t j = threadIdx.x; j < v; j += blockDim.x) p[j] *= inv;
  if (threadIdx.x == 0) {
    // −log p_target = log Σ exp(z − max) − (z_target − max): exact even when
    // p_target underflows to 0. In double, as the reference.
    const std::size_t y = static_cast<std::size_t>(targets[row]);
    row_loss[row] = log(static_cast<double>(sum)) - static_cast<double>(z[y] - max);
  }
}

// One block: thread k sums rows k, k + 1024, … in double, then a tree in
// shared memory; both orders are fixed, so the loss is the same every run.
__global__ void mean_kernel(double* loss, const double* row_loss, std::size_t n) {
  __shared__ double s[kMeanThreads];
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < n; i += kMeanThreads) acc += row_loss[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = kMeanThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = s[0] / static_cast<double>(n);
}

__global__ void cross_entropy_backward_kernel(float* d_logits, const float* probs, const std::int32_t* targets,
                                              std::size_t n, std::size_t v, float scale) {
  for (std::size_t idx = global_index(); idx < n * v; idx += grid_stride()) {
    const std::size_t i = idx / v, j = idx % v;
    const float onehot = j == static_cast<std::size_t>(targets[i]) ? 1.0f : 0.0f;
    d_logits[idx] += scale * (probs[idx] - onehot);
  }
}

__global__ void count_correct_kernel(unsigned long long* correct, const float* logits, const std::int32_t* targets,
                                     std::size_t v) {
  __shared__ float best_value[kRowThreads];
  __shared__ std::size_t best_index[kRowThreads];
  const std::size_t row = blockIdx.x;
  const float* z = logits + row * v;
  // Each thread scans j = tid, tid + 256, … upward with a strict >, so it
  // keeps the first index among its equal maxima …
  std::size_t best = threadIdx.x < v ? threadIdx.x : 0;
  for (std::size_t j = threadIdx.x; j < v; j += blockDim.x)
    if (z[j] > z[best]) best = j;
  best_value[threadIdx.x] = z[best];
  best_index[threadIdx.x] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    // … and the merge prefers the larger value, then the smaller index.
    std::size_t b = best_index[0];
    float bv = best_value[0];
    for (unsigned k = 1; k < blockDim.x && k < v; ++k)
      if (best_value[k] > bv || (best_value[k] == bv && best_index[k] < b)) bv = best_value[k], b = best_index[k];
    if (b == static_cast<std::size_t>(targets[row])) atomicAdd(correct, 1ull);  // integers: order does not matter
  }
}
}  // namespace

Status cross_entropy_forward(Context& ctx, float* probs, double* loss, const float* logits, const std::int32_t* targets,
                             std::size_t n, std::size_t v) {
  GEOLOCO_RETURN_IF(n == 0 || v == 0, Err::invalid_argument, "cross_entropy: empty logits (", n, " x ", v, ")");
  GEOLOCO_RETURN_IF(n > 0x7fffffffu, Err::invalid_argument, "cross_entropy: ", n, " rows exceed one grid");
  auto scratch = ctx.scratch(n * sizeof(double));
  if (!scratch.ok()) return scratch.status();
  double* row_loss = static_cast<double*>(*scratch);
  GEOLOCO_LAUNCH(cross_entropy_forward_kernel, static_cast<unsigned>(n), kRowThreads, ctx.stream(), probs, row_loss,
                 logits, targets, v);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  GEOLOCO_LAUNCH(mean_kernel, 1, kMeanThreads, ctx.stream(), loss, row_loss, n);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status cross_entropy_backward(Context& ctx, float* d_logits, const float* probs, const std::int32_t* targets,
                              std::size_t n, std::size_t v, float d_loss) {
  if (n == 0 || v == 0) return {};
  const float scale = d_loss / static_cast<float>(n);
  GEOLOCO_LAUNCH(cross_entropy_backward_kernel, detail::blocks_for(n * v), detail::kThreads, ctx.stream(), d_logits,
                 probs, targets, n, v, scale);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status count_correct(Context& ctx, unsigned long long* correct, const float* logits, const std::int32_t* targets,
                     std::size_t n, std::size_t v) {
  if (n == 0 || v == 0) return {};
  GEOLOCO_RETURN_IF(n > 0x7fffffffu, Err::invalid_argument, "count_correct: ", n, " rows exceed one grid");
  GEOLOCO_LAUNCH(count_correct_kernel, static_cast<unsigned>(n), kRowThreads, ctx.stream(), correct, logits, targets,
                 v);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

}  // namespace geoloco::inner::cuda
