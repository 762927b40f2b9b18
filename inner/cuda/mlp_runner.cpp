// The `mlp` classifier on the device: inner/models/mlp.cpp, op for op.
#include <vector>

#include "inner/cuda/activations.cuh"
#include "inner/cuda/bias.cuh"
#include "inner/cuda/cross_entropy.cuh"
#include "inner/cuda/matmul.h"
#include "inner/cuda/runners.h"

namespace geoloco::inner::cuda {

namespace {

class DeviceMlp final : public DeviceModel {
 public:
  DeviceMlp(Context& ctx, ParamLayout layout, std::vector<std::size_t> widths)
      : ctx_(ctx), layout_(std::move(layout)), widths_(std::move(widths)) {}

  std::string name() const override { return "mlp"; }
  const ParamLayout& layout() const override { return layout_; }

  Status upload(const Batch& batch) override {
    const std::size_t inputs = widths_.front(), classes = widths_.back();
    GEOLOCO_RETURN_IF(batch.samples == 0, Err::invalid_argument, "mlp: empty batch");
    GEOLOCO_RETURN_IF(batch.features.size() != batch.samples * inputs, Err::invalid_argument, "mlp: batch has ",
                      batch.features.size(), " features, expected samples (", batch.samples, ") x inputs (", inputs,
                      ")");
    GEOLOCO_RETURN_IF(batch.targets.size() != batch.samples, Err::invalid_argument, "mlp: batch has ",
                      batch.targets.size(), " labels for ", batch.samples, " samples");
    for (std::int32_t y : batch.targets)
      GEOLOCO_RETURN_IF(y < 0 || static_cast<std::size_t>(y) >= classes, Err::invalid_argument, "mlp: label ", y,
                        " outside [0, ", classes, ")");
    if (batch.samples != samples_) GEOLOCO_TRY(size_for(batch.samples));
    GEOLOCO_TRY(features_.assign(batch.features, ctx_.stream()));
    return targets_.assign(batch.targets, ctx_.stream());
  }

  Result<double> forward_backward(const float* params, float* grads) override {
    GEOLOCO_RETURN_IF(samples_ == 0, Err::invalid_argument, "mlp: no batch uploaded");
    const std::size_t n = samples_, classes = widths_.back(), layers = widths_.size() - 1;
    GEOLOCO_TRY(forward(params));
    GEOLOCO_TRY(
        cross_entropy_forward(ctx_, probs_.data(), loss_.data(), pre_.back().data(), targets_.data(), n, classes));
    GEOLOCO_CUDA_CHECK(cudaMemsetAsync(grads, 0, layout_.total() * sizeof(float), ctx_.stream()));
    GEOLOCO_CUDA_CHECK(cudaMemsetAsync(d_a_.data(), 0, n * classes * sizeof(float), ctx_.stream()));
    GEOLOCO_TRY(cross_entropy_backward(ctx_, d_a_.data(), probs_.data(), targets_.data(), n, classes));
    for (std::size_t i = layers; i-- > 0;) {
      // d_a_ holds d(loss)/d(pre_[i]).
      const float* in = i == 0 ? features_.data() : post_[i - 1].data();
      const float* w = params + layout_.tensors()[2 * i].offset;
      float* dw = grads + layout_.tensors()[2 * i].offset;
      float* db = grads + layout_.tensors()[2 * i + 1].offset;
      if (i > 0) GEOLOCO_CUDA_CHECK(cudaMemsetAsync(d_b_.data(), 0, n * widths_[i] * sizeof(float), ctx_.stream()));
      GEOLOCO_TRY(
          matmul_backward(ctx_, i == 0 ? nullptr : d_b_.data(), dw, d_a_.data(), in, w, n, widths_[i], widths_[i + 1]));
      GEOLOCO_TRY(bias_backward(ctx_, db, d_a_.data(), n, widths_[i + 1]));
      if (i > 0) {
        GEOLOCO_CUDA_CHECK(cudaMemsetAsync(d_a_.data(), 0, n * widths_[i] * sizeof(float), ctx_.stream()));
        GEOLOCO_TRY(relu_backward(ctx_, d_a_.data(), d_b_.data(), pre_[i - 1].data(), n * widths_[i]));
      }
    }
    return read_loss();
  }

  Result<EvalResult> evaluate(const float* params) override {
    GEOLOCO_RETURN_IF(samples_ == 0, Err::invalid_argument, "mlp: no batch uploaded");
    const std::size_t n = samples_, classes = widths_.back();
    GEOLOCO_TRY(forward(params));
    GEOLOCO_TRY(
        cross_entropy_forward(ctx_, probs_.data(), loss_.data(), pre_.back().data(), targets_.data(), n, classes));
    GEOLOCO_TRY(correct_.zero(ctx_.stream()));
    GEOLOCO_TRY(count_correct(ctx_, correct_.data(), pre_.back().data(), targets_.data(), n, classes));
    return read_eval(ctx_, loss_, correct_, n);
  }

 private:
  Status size_for(std::size_t n) {
    samples_ = 0;
    const std::size_t layers = widths_.size() - 1;
    pre_.resize(layers);
    post_.resize(layers);
    std::size_t widest = 0;
    for (std::size_t i = 0; i < layers; ++i) {
      GEOLOCO_TRY(pre_[i].allocate(n * widths_[i + 1]));
      if (i + 1 < layers) GEOLOCO_TRY(post_[i].allocate(n * widths_[i + 1]));
      widest = std::max(widest, widths_[i + 1]);
    }
    GEOLOCO_TRY(probs_.allocate(n * widths_.back()));
    GEOLOCO_TRY(d_a_.allocate(n * widest));
    GEOLOCO_TRY(d_b_.allocate(n * widest));
    GEOLOCO_TRY(loss_.allocate(1));
    GEOLOCO_TRY(correct_.allocate(1));
    samples_ = n;
    return {};
  }

  /// Runs the layers; leaves the logits in pre_.back().
  Status forward(const float* params) {
    const std::size_t n = samples_;
    const float* in = features_.data();
    for (std::size_t i = 0; i + 1 < widths_.size(); ++i) {
      const float* w = params + layout_.tensors()[2 * i].offset;
      const float* b = params + layout_.tensors()[2 * i + 1].offset;
      GEOLOCO_TRY(matmul_forward(ctx_, pre_[i].data(), in, w, n, widths_[i], widths_[i + 1]));
      GEOLOCO_TRY(bias_forward(ctx_, pre_[i].data(), b, n, widths_[i + 1]));
      if (i + 2 < widths_.size()) {  // every layer but the output one
        GEOLOCO_TRY(relu_forward(ctx_, post_[i].data(), pre_[i].data(), n * widths_[i + 1]));
        in = post_[i].data();
      }
    }
    return {};
  }

  Result<double> read_loss() {
    double loss = 0.0;
    GEOLOCO_TRY(loss_.copy_to(std::span<double>(&loss, 1), ctx_.stream()));
    return loss;
  }

  Context& ctx_;
  ParamLayout layout_;
  std::vector<std::size_t> widths_;  // inputs, hidden..., classes
  std::size_t samples_ = 0;
  DeviceBuffer<float> features_;
  DeviceBuffer<std::int32_t> targets_;
  std::vector<DeviceBuffer<float>> pre_, post_;
  DeviceBuffer<float> probs_, d_a_, d_b_;
  DeviceBuffer<double> loss_;
  DeviceBuffer<unsigned long long> correct_;
};

}  // namespace

Result<std::unique_ptr<DeviceModel>> make_device_mlp(Context& ctx, const ParamLayout& layout) {
  // The CPU Mlp keeps its options private; its layout says everything:
  // "fc{i}.w" [in, out] then "fc{i}.b" [out], layer by layer.
  const auto& t = layout.tensors();
  GEOLOCO_RETURN_IF(t.empty() || t.size() % 2 != 0, Err::internal, "mlp: layout of ", t.size(),
                    " tensors is not (weight, bias) pairs");
  std::vector<std::size_t> widths;
  for (std::size_t i = 0; i < t.size(); i += 2) {
    GEOLOCO_RETURN_IF(t[i].shape.size() != 2 || t[i + 1].shape.size() != 1 || t[i + 1].shape[0] != t[i].shape[1] ||
                          (!widths.empty() && widths.back() != t[i].shape[0]),
                      Err::internal, "mlp: tensor ", t[i].name, " does not chain with the previous layer");
    if (widths.empty()) widths.push_back(t[i].shape[0]);
    widths.push_back(t[i].shape[1]);
  }
  return std::unique_ptr<DeviceModel>(new DeviceMlp(ctx, layout, std::move(widths)));
}

}  // namespace geoloco::inner::cuda
