#include "inner/cuda/activations.cuh"
#include "inner/cuda/kernel_util.cuh"

namespace geoloco::inner::cuda {

namespace {
using detail::global_index;
using detail::grid_stride;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// The arithmetic is written in the CPU reference's order (and the library is
// built with --fmad=false), so only tanhf's last bits can differ from libm's.
__global__ void gelu_forward_kernel(float* out, const float* in, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float x = in[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

__global__ void gelu_backward_kernel(float* d_in, const float* d_out, const float* in, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float x = in[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float t = tanhf(u);
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 − tanh² u) u'
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    d_in[i] += d_out[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
}

__global__ void relu_forward_kernel(float* out, const float* in, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

__global__ void relu_backward_kernel(float* d_in, const float* d_out, const float* in, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride())
    if (in[i] > 0.0f) d_in[i] += d_out[i];
}
}  // namespace

Status gelu_forward(Context& ctx, float* out, const float* in, std::size_t n) {
  if (n == 0) return {};  // a grid of 0 blocks is a launch error
  GEOLOCO_LAUNCH(gelu_forward_kernel, detail::blocks_for(n), detail::kThreads, ctx.stream(), out, in, n);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status gelu_backward(Context& ctx, float* d_in, const float* d_out, const float* in, std::size_t n) {
  if (n == 0) return {};
  GEOLOCO_LAUNCH(gelu_backward_kernel, detail::blocks_for(n), detail::kThreads, ctx.stream(), d_in, d_out, in, n);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status relu_forward(Context& ctx, float* out, const float* in, std::size_t n) {
  if (n == 0) return {};
  GEOLOCO_LAUNCH(relu_forward_kernel, detail::blocks_for(n), detail::kThreads, ctx.stream(), out, in, n);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status relu_backward(Context& ctx, float* d_in, const float* d_out, const float* in, std::size_t n) {
  if (n == 0) return {};
  GEOLOCO_LAUNCH(relu_backward_kernel, detail::blocks_for(n), detail::kThreads, ctx.stream(), d_in, d_out, in, n);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

}  // namespace geoloco::inner::cuda
