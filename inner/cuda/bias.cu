#include "inner/cuda/bias.cuh"
#include "inner/cuda/kernel_util.cuh"

namespace geoloco::inner::cuda {

namespace {
using detail::global_index;
using detail::grid_stride;

__global__ void bias_forward_kernel(float* out, const float* b, std::size_t n, std::size_t m) {
  for (std::size_t i = global_index(); i < n * m; i += grid_stride()) out[i] += b[i % m];
}

struct RowValue {
  const float* d_out;
  std::size_t m;
  __device__ float operator()(std::size_t i, std::size_t j) const { return d_out[i * m + j]; }
};
}  // namespace

Status bias_forward(Context& ctx, float* out, const float* b, std::size_t n, std::size_t m) {
  if (n == 0 || m == 0) return {};
  GEOLOCO_LAUNCH(bias_forward_kernel, detail::blocks_for(n * m), detail::kThreads, ctx.stream(), out, b, n, m);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status bias_backward(Context& ctx, float* d_b, const float* d_out, std::size_t n, std::size_t m) {
  return detail::column_sum(ctx, d_b, n, m, RowValue{d_out, m});
}

}  // namespace geoloco::inner::cuda
