#include <cmath>
#include <utility>

#include "inner/cuda/adamw.cuh"
#include "inner/cuda/kernel_util.cuh"

namespace geoloco::inner::cuda {

namespace {
struct Constants {
  float b1, b2, c1, c2, bias1, bias2, eps, rate, shrink;
};

// Line for line the reference's loop body (inner/cpu/adamw.cpp).
__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, const std::uint8_t* decay,
                             std::size_t n, Constants k) {
  for (std::size_t i = detail::global_index(); i < n; i += detail::grid_stride()) {
    const float g = grads[i];
    const float mi = k.b1 * m[i] + k.c1 * g;
    const float vi = k.b2 * v[i] + k.c2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / k.bias1;
    const float v_hat = vi / k.bias2;
    const float theta = decay[i] ? params[i] * k.shrink : params[i];
    params[i] = theta - k.rate * m_hat / (sqrtf(v_hat) + k.eps);
  }
}
}  // namespace

Result<std::unique_ptr<AdamW>> AdamW::create(Context& ctx, std::size_t parameters, cpu::AdamWOptions options,
                                             std::vector<std::pair<std::size_t, std::size_t>> decay_ranges) {
  GEOLOCO_TRY(options.validate());
  std::unique_ptr<AdamW> opt(new AdamW(options));
  std::vector<std::uint8_t> decay(parameters, 0);
  for (auto [begin, end] : decay_ranges) {
    GEOLOCO_RETURN_IF(begin > end || end > parameters, Err::invalid_argument, "adamw: decay range [", begin, ", ", end,
                      ") is not inside ", parameters, " parameters");
    for (std::size_t i = begin; i < end; ++i) decay[i] = 1;
  }
  GEOLOCO_TRY(opt->m_.allocate(parameters));
  GEOLOCO_TRY(opt->v_.allocate(parameters));
  GEOLOCO_TRY(opt->m_.zero(ctx.stream()));
  GEOLOCO_TRY(opt->v_.zero(ctx.stream()));
  GEOLOCO_TRY(opt->decay_.assign(decay, ctx.stream()));
  // Built explicitly: nvcc's front end does not move `opt` into the Result
  // on return, and GCC would call a std::move there redundant.
  Result<std::unique_ptr<AdamW>> result(std::move(opt));
  return result;
}

Status AdamW::step(Context& ctx, float* params, const float* grads, double lr) {
  GEOLOCO_RETURN_IF(!(lr >= 0.0 && std::isfinite(lr)), Err::invalid_argument, "adamw: lr must be finite and >= 0, got ",
                    lr);
  ++t_;
  beta1_t_ *= options_.beta1;
  beta2_t_ *= options_.beta2;
  // The same conversions to fp32 as the reference, from the same doubles.
  const Constants k{static_cast<float>(options_.beta1),
                    static_cast<float>(options_.beta2),
                    static_cast<float>(1.0 - options_.beta1),
                    static_cast<float>(1.0 - options_.beta2),
                    static_cast<float>(1.0 - beta1_t_),
                    static_cast<float>(1.0 - beta2_t_),
                    static_cast<float>(options_.epsilon),
                    static_cast<float>(lr),
                    static_cast<float>(1.0 - lr * options_.weight_decay)};
  const std::size_t n = m_.size();
  if (n == 0) return {};
  GEOLOCO_LAUNCH(adamw_kernel, detail::blocks_for(n), detail::kThreads, ctx.stream(), params, m_.data(), v_.data(),
                 grads, decay_.data(), n, k);
  GEOLOCO_CUDA_CHECK_LAUNCH();
  return {};
}

Status AdamW::download_moments(Context& ctx, std::span<float> m, std::span<float> v) const {
  GEOLOCO_TRY(m_.copy_to(m, ctx.stream()));
  return v_.copy_to(v, ctx.stream());
}

Status AdamW::restore(Context& ctx, std::span<const float> m, std::span<const float> v, std::uint64_t steps) {
  GEOLOCO_RETURN_IF(m.size() != m_.size() || v.size() != v_.size(), Err::invalid_argument, "adamw: state has ",
                    m_.size(), " values, restore got ", m.size(), " and ", v.size());
  GEOLOCO_TRY(m_.assign(m, ctx.stream()));
  GEOLOCO_TRY(v_.assign(v, ctx.stream()));
  // The reference's loop (inner/cpu/adamw.cpp), so β^t has the same bits.
  t_ = steps;
  beta1_t_ = 1.0;
  beta2_t_ = 1.0;
  for (std::uint64_t i = 0; i < steps; ++i) {
    beta1_t_ *= options_.beta1;
    beta2_t_ *= options_.beta2;
  }
  return {};
}

}  // namespace geoloco::inner::cuda
