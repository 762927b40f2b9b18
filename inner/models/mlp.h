// `mlp`: a multilayer perceptron classifier (Fashion-MNIST by default):
//   x[784] → (Linear → ReLU) per hidden layer → Linear → logits[10] → softmax CE.
// Parameters: "fc{i}.w" [in, out] (stored input-major, y = x·W + b) and
// "fc{i}.b" [out], layer by layer.
#pragma once

#include <memory>
#include <vector>

#include "inner/models/model.h"

namespace geoloco::inner {

struct MlpOptions {
  std::size_t inputs = 784;                      ///< features per sample, >= 1
  std::vector<std::size_t> hidden = {256, 128};  ///< widths of the hidden layers, each >= 1 (may be empty)
  std::size_t classes = 10;                      ///< output classes, >= 2

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

class Mlp final : public Model {
 public:
  /// Errors: invalid_argument (options).
  static Result<std::unique_ptr<Mlp>> create(const MlpOptions& options);

  std::string name() const override { return "mlp"; }
  const ParamLayout& layout() const override { return layout_; }
  void init(std::span<float> params, std::uint64_t seed) const override;
  Result<double> forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) override;
  Result<EvalResult> evaluate(std::span<const float> params, const Batch& batch) override;
  std::size_t work_units(const Batch& batch) const override { return batch.samples; }
  std::string work_unit_name() const override { return "samples"; }
  double train_flops(std::size_t samples) const override;
  GemmShape largest_gemm(std::size_t samples) const override;
  std::vector<std::pair<std::size_t, std::size_t>> decay_ranges() const override;

 private:
  explicit Mlp(const MlpOptions& options);
  Status check(std::span<const float> params, const Batch& batch) const;
  /// Runs the layers; leaves logits in pre_.back().
  void forward(std::span<const float> params, const Batch& batch);

  MlpOptions options_;
  std::vector<std::size_t> widths_;  // inputs, hidden..., classes
  ParamLayout layout_;
  // Per layer i: pre_[i] = input·W + b, post_[i] = ReLU(pre_[i]) (not for the last).
  std::vector<std::vector<float>> pre_;
  std::vector<std::vector<float>> post_;
  std::vector<float> probs_;
  std::vector<float> d_a_;  // gradient w.r.t. the current layer's output
  std::vector<float> d_b_;  // … and w.r.t. its input
};

}  // namespace geoloco::inner
