#include "inner/cuda/embedding.cuh"
#include "inner/cuda/kernel_util.cuh"

namespace geoloco::inner::cuda {

namespace {
using detail::global_index;
using detail::grid_stride;

constexpr int kColumns = 128;  // columns of one token row per block in the d_wte pass

__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                         std::size_t n, std::size_t t, std::size_t c) {
  for (std::size_t idx = global_index(); idx < n * c; idx += grid_stride()) {
    const std::size_t row = idx / c, j = idx % c;
    const std::size_t token = static_cast<std::size_t>(tokens[row]);
    out[idx] = wte[token * c + j] + wpe[(row % t) * c + j];
  }
}

// Block (v, column tile): the rows of token v, in increasing position order.
__global__ void embedding_backward_wte_kernel(float* d_wte, const float* d_out, const std::int32_t* offsets,
                                              const std::int32_t* positions, std::size_t c) {
  const std::size_t v = blockIdx.x;
  const std::size_t j = static_cast<std::size_t>(blockIdx.y) * kColumns + threadIdx.x;
  const std::int32_t begin = offsets[v], end = offsets[v + 1];
  if (j >= c || begin == end) return;
  float acc = d_wte[v * c + j];
  for (std::int32_t p = begin; p < end; ++p) acc += d_out[static_cast<std::size_t>(positions[p]) * c + j];
  d_wte[v * c + j] = acc;
}

// Thread (i, j) adds the batch's rows of position i, b = 0, 1, … in order.
__global__ void embedding_backward_wpe_kernel(float* d_wpe, const float* d_out, std::size_t batch, std::size_t t,
                                              std::size_t c) {
  for (std::size_t idx = global_index(); idx < t * c; idx += grid_stride()) {
    const std::size_t i = idx / c, j = idx % c;
    float acc = d_wpe[idx];
    for (std::size_t b = 0; b < batch; ++b) acc += d_out[(b * t + i) * c + j];
    d_wpe[idx] = acc;
  }
}
}  // namespace

TokenIndex build_token_index(std::span<const std::int32_t> tokens, std::size_t vocab) {
  TokenIndex index;
  index.offsets.assign(vocab + 1, 0);
  for (std::int32_t token : tokens) ++index.offsets[static_cast<std::size_t>(token) + 1];
  for (std::size_t v = 0; v < vocab; ++v) index.offsets[v + 1] += index.offsets[v];
  std::vector<std::int32_t> next(index.offsets.begin(), index.offsets.end() - 1);
  index.positions.resize(tokens.size());
  for (std::size_t p = 0; p < tokens.size(); ++p)
    index.positions[static_cast<std::size_t>(next[static_cast<std::size_t>(tokens[p])]++)] =
        static_cast<std::int32_t>(p);
  return index;
}

Status embedding_forward(Context& ctx, float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                         std::size_t batch, std::size_t t, std::size_t c) {
  const std::size_t n = batch * t;
  if (n == 0 || c == 0) return {};
  GEOLOCO_LAUNCH(embedding_forward_kernel, detail::blocks_for(n * c), detail::kThreads, ctx.stream(), out, tokens, wte,
                 wpe, n, t, c);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status embedding_backward(Context& ctx, float* d_wte, float* d_wpe, const float* d_out, const std::int32_t* offsets,
                          const std::int32_t* positions, std::size_t vocab, std::size_t batch, std::size_t t,
                          std::size_t c) {
  if (batch == 0 || t == 0 || c == 0 || vocab == 0) return {};
  const dim3 grid(static_cast<unsigned>(vocab), static_cast<unsigned>((c + kColumns - 1) / kColumns));
  GEOLOCO_LAUNCH(embedding_backward_wte_kernel, grid, kColumns, ctx.stream(), d_wte, d_out, offsets, positions, c);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  GEOLOCO_LAUNCH(embedding_backward_wpe_kernel, detail::blocks_for(t * c), detail::kThreads, ctx.stream(), d_wpe, d_out,
                 batch, t, c);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

}  // namespace geoloco::inner::cuda
