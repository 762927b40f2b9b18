#include "inner/models/mlp.h"

#include <algorithm>
#include <cmath>

#include "inner/cpu/activations.h"
#include "inner/cpu/bias.h"
#include "inner/cpu/cross_entropy.h"
#include "inner/cpu/matmul.h"
#include "inner/rng.h"

namespace geoloco::inner {

Status MlpOptions::validate() const {
  GEOLOCO_RETURN_IF(inputs == 0, Err::invalid_argument, "mlp: inputs must be >= 1");
  GEOLOCO_RETURN_IF(classes < 2, Err::invalid_argument, "mlp: classes must be >= 2, got ", classes);
  for (std::size_t h : hidden) GEOLOCO_RETURN_IF(h == 0, Err::invalid_argument, "mlp: every hidden width must be >= 1");
  return {};
}

Result<std::unique_ptr<Mlp>> Mlp::create(const MlpOptions& options) {
  GEOLOCO_TRY(options.validate());
  return std::unique_ptr<Mlp>(new Mlp(options));
}

Mlp::Mlp(const MlpOptions& options) : options_(options) {
  widths_.push_back(options.inputs);
  for (std::size_t h : options.hidden) widths_.push_back(h);
  widths_.push_back(options.classes);
  for (std::size_t i = 0; i + 1 < widths_.size(); ++i) {
    layout_.add(cat("fc", i, ".w"), {widths_[i], widths_[i + 1]});
    layout_.add(cat("fc", i, ".b"), {widths_[i + 1]});
  }
  pre_.resize(widths_.size() - 1);
  post_.resize(widths_.size() - 1);
}

void Mlp::init(std::span<float> params, std::uint64_t seed) const {
  // He initialization (std √(2/fan_in)) keeps the ReLU layers' activations at
  // a steady scale; the output layer uses √(1/fan_in) so initial logits are
  // small and the first loss is close to log(classes). Each tensor draws from
  // its own stream, so resizing one layer does not change the others.
  const std::size_t layers = widths_.size() - 1;
  for (std::size_t i = 0; i < layers; ++i) {
    const TensorDesc& w = layout_.tensors()[2 * i];
    const TensorDesc& b = layout_.tensors()[2 * i + 1];
    const double gain = i + 1 == layers ? 1.0 : 2.0;
    const double std = std::sqrt(gain / static_cast<double>(widths_[i]));
    Rng rng(seed, 2 * i);
    for (float& v : layout_.view(params, w)) v = static_cast<float>(std * rng.normal());
    for (float& v : layout_.view(params, b)) v = 0.0f;
  }
}

Status Mlp::check(std::span<const float> params, const Batch& batch) const {
  GEOLOCO_RETURN_IF(params.size() != layout_.total(), Err::invalid_argument, "mlp: ", params.size(),
                    " parameters given, the layout has ", layout_.total());
  GEOLOCO_RETURN_IF(batch.samples == 0, Err::invalid_argument, "mlp: empty batch");
  GEOLOCO_RETURN_IF(batch.features.size() != batch.samples * options_.inputs, Err::invalid_argument, "mlp: batch has ",
                    batch.features.size(), " features, expected samples (", batch.samples, ") x inputs (",
                    options_.inputs, ")");
  GEOLOCO_RETURN_IF(batch.targets.size() != batch.samples, Err::invalid_argument, "mlp: batch has ",
                    batch.targets.size(), " labels for ", batch.samples, " samples");
  for (std::int32_t y : batch.targets)
    GEOLOCO_RETURN_IF(y < 0 || static_cast<std::size_t>(y) >= options_.classes, Err::invalid_argument, "mlp: label ", y,
                      " outside [0, ", options_.classes, ")");
  return {};
}

void Mlp::forward(std::span<const float> params, const Batch& batch) {
  const std::size_t n = batch.samples;
  const float* in = batch.features.data();
  for (std::size_t i = 0; i + 1 < widths_.size(); ++i) {
    const float* w = params.data() + layout_.tensors()[2 * i].offset;
    const float* b = params.data() + layout_.tensors()[2 * i + 1].offset;
    pre_[i].resize(n * widths_[i + 1]);
    cpu::matmul_forward(pre_[i].data(), in, w, n, widths_[i], widths_[i + 1]);
    cpu::bias_forward(pre_[i].data(), b, n, widths_[i + 1]);
    if (i + 2 < widths_.size()) {  // every layer but the output one
      post_[i].resize(pre_[i].size());
      cpu::relu_forward(post_[i].data(), pre_[i].data(), pre_[i].size());
      in = post_[i].data();
    }
  }
}

Result<double> Mlp::forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) {
  GEOLOCO_TRY(check(params, batch));
  GEOLOCO_RETURN_IF(grads.size() != layout_.total(), Err::invalid_argument, "mlp: ", grads.size(),
                    " gradients given, the layout has ", layout_.total());
  const std::size_t n = batch.samples;
  const std::size_t layers = widths_.size() - 1;
  forward(params, batch);
  probs_.resize(n * options_.classes);
  const double loss =
      cpu::cross_entropy_forward(probs_.data(), pre_.back().data(), batch.targets.data(), n, options_.classes);

  std::fill(grads.begin(), grads.end(), 0.0f);
  d_a_.assign(n * options_.classes, 0.0f);
  cpu::cross_entropy_backward(d_a_.data(), probs_.data(), batch.targets.data(), n, options_.classes);
  for (std::size_t i = layers; i-- > 0;) {
    // d_a_ holds d(loss)/d(pre_[i]).
    const float* in = i == 0 ? batch.features.data() : post_[i - 1].data();
    const float* w = params.data() + layout_.tensors()[2 * i].offset;
    float* dw = grads.data() + layout_.tensors()[2 * i].offset;
    float* db = grads.data() + layout_.tensors()[2 * i + 1].offset;
    d_b_.assign(i == 0 ? 0 : n * widths_[i], 0.0f);
    cpu::matmul_backward(i == 0 ? nullptr : d_b_.data(), dw, d_a_.data(), in, w, n, widths_[i], widths_[i + 1]);
    cpu::bias_backward(db, d_a_.data(), n, widths_[i + 1]);
    if (i > 0) {
      d_a_.assign(n * widths_[i], 0.0f);
      cpu::relu_backward(d_a_.data(), d_b_.data(), pre_[i - 1].data(), d_a_.size());
    }
  }
  return loss;
}

Result<EvalResult> Mlp::evaluate(std::span<const float> params, const Batch& batch) {
  GEOLOCO_TRY(check(params, batch));
  forward(params, batch);
  probs_.resize(batch.samples * options_.classes);
  EvalResult r;
  r.loss = cpu::cross_entropy_forward(probs_.data(), pre_.back().data(), batch.targets.data(), batch.samples,
                                      options_.classes);
  r.correct = cpu::count_correct(pre_.back().data(), batch.targets.data(), batch.samples, options_.classes);
  r.predictions = batch.samples;
  return r;
}

double Mlp::train_flops(std::size_t samples) const {
  double forward = 0.0;
  for (std::size_t i = 0; i + 1 < widths_.size(); ++i)
    forward += 2.0 * static_cast<double>(widths_[i]) * static_cast<double>(widths_[i + 1]);
  return 3.0 * forward * static_cast<double>(samples);
}

GemmShape Mlp::largest_gemm(std::size_t samples) const {
  GemmShape best;
  for (std::size_t i = 0; i + 1 < widths_.size(); ++i)
    if (widths_[i] * widths_[i + 1] > best.k * best.n) best = {samples, widths_[i], widths_[i + 1]};
  return best;
}

std::vector<std::pair<std::size_t, std::size_t>> Mlp::decay_ranges() const {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (std::size_t i = 0; i + 1 < widths_.size(); ++i) {
    const TensorDesc& w = layout_.tensors()[2 * i];
    ranges.emplace_back(w.offset, w.offset + w.size());
  }
  return ranges;
}

}  // namespace geoloco::inner
