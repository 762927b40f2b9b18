#include <cmath>

#include "inner/cuda/attention.cuh"
#include "inner/cuda/blas.h"
#include "inner/cuda/kernel_util.cuh"

namespace geoloco::inner::cuda {

namespace {
using detail::global_index;
using detail::grid_stride;
using detail::warp_max;
using detail::warp_sum;

constexpr int kWarpsPerBlock = 8;

struct Shape {
  std::size_t b, t, heads, hs;
  std::size_t elements() const { return b * t * heads * hs; }
};

// dst[b,h,t,d] = src[(b·T + t)·stride + offset + h·hs + d]: one of q, k, v
// (or d_out) out of its row-major activation into head-major scratch.
__global__ void split_heads_kernel(float* dst, const float* src, Shape s, std::size_t stride, std::size_t offset) {
  const std::size_t total = s.b * s.heads * s.t * s.hs;
  for (std::size_t idx = global_index(); idx < total; idx += grid_stride()) {
    const std::size_t d = idx % s.hs;
    std::size_t r = idx / s.hs;
    const std::size_t t = r % s.t;
    r /= s.t;
    const std::size_t h = r % s.heads;
    const std::size_t b = r / s.heads;
    dst[idx] = src[(b * s.t + t) * stride + offset + h * s.hs + d];
  }
}

// The inverse: writes (accumulate = false) or adds (true) head-major src back.
__global__ void merge_heads_kernel(float* dst, const float* src, Shape s, std::size_t stride, std::size_t offset,
                                   bool accumulate) {
  const std::size_t total = s.b * s.heads * s.t * s.hs;
  for (std::size_t idx = global_index(); idx < total; idx += grid_stride()) {
    const std::size_t d = idx % s.hs;
    std::size_t r = idx / s.hs;
    const std::size_t t = r % s.t;
    r /= s.t;
    const std::size_t h = r % s.heads;
    const std::size_t b = r / s.heads;
    float& y = dst[(b * s.t + t) * stride + offset + h * s.hs + d];
    y = accumulate ? y + src[idx] : src[idx];
  }
}

// Row `row` of the [B·heads·T, T] score matrix, query position i = row % T,
// sees keys 0..i. Softmax in place; entries above the diagonal become 0.
__global__ void causal_softmax_forward_kernel(float* att, std::size_t rows, std::size_t t) {
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps only: the shuffles need all 32 lanes
  const std::size_t i = row % t;
  float* a = att + row * t;
  float max = a[0];  // key 0 is always visible
  for (std::size_t j = lane; j <= i; j += 32) max = a[j] > max ? a[j] : max;
  max = warp_max(max);
  float sum = 0.0f;
  for (std::size_t j = lane; j <= i; j += 32) {
    const float e = expf(a[j] - max);  // minus the max: exp cannot overflow
    a[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (std::size_t j = lane; j < t; j += 32) a[j] = j <= i ? a[j] * inv : 0.0f;  // the causal mask
}

// d_score_j = att_j · (d_att_j − Σ_k att_k d_att_k), in place over d_att;
// masked entries (att = 0) get 0, as in the reference.
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, std::size_t rows, std::size_t t) {
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const unsigned lane = threadIdx.x % 32;
  if (row >= rows) return;
  const std::size_t i = row % t;
  const float* a = att + row * t;
  float* da = datt + row * t;
  float dot = 0.0f;
  for (std::size_t j = lane; j <= i; j += 32) dot += a[j] * da[j];
  dot = warp_sum(dot);
  for (std::size_t j = lane; j < t; j += 32) da[j] = j <= i ? a[j] * (da[j] - dot) : 0.0f;
}

Status split(Context& ctx, float* dst, const float* src, Shape s, std::size_t stride, std::size_t offset) {
  GEOLOCO_LAUNCH(split_heads_kernel, detail::blocks_for(s.elements()), detail::kThreads, ctx.stream(), dst, src, s,
                 stride, offset);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status merge(Context& ctx, float* dst, const float* src, Shape s, std::size_t stride, std::size_t offset,
             bool accumulate) {
  GEOLOCO_LAUNCH(merge_heads_kernel, detail::blocks_for(s.elements()), detail::kThreads, ctx.stream(), dst, src, s,
                 stride, offset, accumulate);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

unsigned row_blocks(std::size_t rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }
int I(std::size_t v) { return static_cast<int>(v); }
long long L(std::size_t v) { return static_cast<long long>(v); }
}  // namespace

Status attention_forward(Context& ctx, float* out, float* att, const float* qkv, std::size_t batch, std::size_t t,
                         std::size_t c, std::size_t heads) {
  if (batch == 0 || t == 0) return {};
  GEOLOCO_RETURN_IF(heads == 0 || c % heads != 0, Err::invalid_argument, "attention: width ", c,
                    " is not a multiple of heads ", heads);
  const Shape s{batch, t, heads, c / heads};
  const std::size_t nc = batch * t * c;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs));
  auto scratch = ctx.scratch(4 * nc * sizeof(float));
  if (!scratch.ok()) return scratch.status();
  float* q = static_cast<float*>(*scratch);
  float* k = q + nc;
  float* v = k + nc;
  float* y = v + nc;
  GEOLOCO_TRY(split(ctx, q, qkv, s, 3 * c, 0));
  GEOLOCO_TRY(split(ctx, k, qkv, s, 3 * c, c));
  GEOLOCO_TRY(split(ctx, v, qkv, s, 3 * c, 2 * c));
  const int bh = I(batch * heads);
  const long long th = L(t * s.hs), tt = L(t * t);
  // scores = scale · q · kᵀ for every (b, head); the upper triangle is
  // computed and then masked, as the reference does.
  GEOLOCO_TRY(gemm_strided_batched(ctx, false, true, I(t), I(t), I(s.hs), scale, q, I(s.hs), th, k, I(s.hs), th, 0.0f,
                                   att, I(t), tt, bh));
  GEOLOCO_LAUNCH(causal_softmax_forward_kernel, row_blocks(batch * heads * t), kWarpsPerBlock * 32, ctx.stream(), att,
                 batch * heads * t, t);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  // y = att · v
  GEOLOCO_TRY(gemm_strided_batched(ctx, false, false, I(t), I(s.hs), I(t), 1.0f, att, I(t), tt, v, I(s.hs), th, 0.0f, y,
                                   I(s.hs), th, bh));
  return merge(ctx, out, y, s, c, 0, false);
}

Status attention_backward(Context& ctx, float* d_qkv, const float* d_out, const float* qkv, const float* att,
                          std::size_t batch, std::size_t t, std::size_t c, std::size_t heads) {
  if (batch == 0 || t == 0) return {};
  GEOLOCO_RETURN_IF(heads == 0 || c % heads != 0, Err::invalid_argument, "attention: width ", c,
                    " is not a multiple of heads ", heads);
  const Shape s{batch, t, heads, c / heads};
  const std::size_t nc = batch * t * c;
  const std::size_t rows = batch * heads * t;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs));
  auto scratch = ctx.scratch((7 * nc + rows * t) * sizeof(float));
  if (!scratch.ok()) return scratch.status();
  float* q = static_cast<float*>(*scratch);
  float* k = q + nc;
  float* v = k + nc;
  float* dq = v + nc;
  float* dk = dq + nc;
  float* dv = dk + nc;
  float* dy = dv + nc;
  float* datt = dy + nc;
  GEOLOCO_TRY(split(ctx, q, qkv, s, 3 * c, 0));
  GEOLOCO_TRY(split(ctx, k, qkv, s, 3 * c, c));
  GEOLOCO_TRY(split(ctx, v, qkv, s, 3 * c, 2 * c));
  GEOLOCO_TRY(split(ctx, dy, d_out, s, c, 0));
  const int bh = I(batch * heads);
  const long long th = L(t * s.hs), tt = L(t * t);
  // d_att = dy · vᵀ;  dv = attᵀ · dy
  GEOLOCO_TRY(gemm_strided_batched(ctx, false, true, I(t), I(t), I(s.hs), 1.0f, dy, I(s.hs), th, v, I(s.hs), th, 0.0f,
                                   datt, I(t), tt, bh));
  GEOLOCO_TRY(gemm_strided_batched(ctx, true, false, I(t), I(s.hs), I(t), 1.0f, att, I(t), tt, dy, I(s.hs), th, 0.0f,
                                   dv, I(s.hs), th, bh));
  GEOLOCO_LAUNCH(causal_softmax_backward_kernel, row_blocks(rows), kWarpsPerBlock * 32, ctx.stream(), datt, att, rows,
                 t);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  // scores = scale · q · kᵀ  ⇒  dq = scale · d_score · k;  dk = scale · d_scoreᵀ · q
  GEOLOCO_TRY(gemm_strided_batched(ctx, false, false, I(t), I(s.hs), I(t), scale, datt, I(t), tt, k, I(s.hs), th, 0.0f,
                                   dq, I(s.hs), th, bh));
  GEOLOCO_TRY(gemm_strided_batched(ctx, true, false, I(t), I(s.hs), I(t), scale, datt, I(t), tt, q, I(s.hs), th, 0.0f,
                                   dk, I(s.hs), th, bh));
  GEOLOCO_TRY(merge(ctx, d_qkv, dq, s, 3 * c, 0, true));
  GEOLOCO_TRY(merge(ctx, d_qkv, dk, s, 3 * c, c, true));
  return merge(ctx, d_qkv, dv, s, 3 * c, 2 * c, true);
}

}  // namespace geoloco::inner::cuda
