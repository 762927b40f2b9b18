#include "inner/cuda/kernel_util.cuh"
#include "inner/cuda/residual.cuh"

namespace geoloco::inner::cuda {

namespace {
__global__ void residual_forward_kernel(float* out, const float* a, const float* b, std::size_t n) {
  for (std::size_t i = detail::global_index(); i < n; i += detail::grid_stride()) out[i] = a[i] + b[i];
}
}  // namespace

Status residual_forward(Context& ctx, float* out, const float* a, const float* b, std::size_t n) {
  if (n == 0) return {};
  GEOLOCO_LAUNCH(residual_forward_kernel, detail::blocks_for(n), detail::kThreads, ctx.stream(), out, a, b, n);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

}  // namespace geoloco::inner::cuda
