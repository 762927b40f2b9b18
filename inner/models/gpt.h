// `gpt`: a small decoder-only transformer over bytes (GPT-2's architecture):
//
//   x = wte[token] + wpe[position]
//   per block:  x = x + proj(attention_causal(qkv(layernorm1(x))))
//               x = x + fc_proj(gelu(fc(layernorm2(x))))
//   logits = layernorm_f(x) · wteᵀ        (the head shares the token embedding)
//   loss   = mean over every position of −log softmax(logits)[next byte]
//
// Parameters, in order: "wte" [vocab, width], "wpe" [context, width], then
// per block l "h{l}.ln1.w/.b", "h{l}.attn.qkv.w" [width, 3·width] /.b,
// "h{l}.attn.proj.w" [width, width] /.b, "h{l}.ln2.w/.b",
// "h{l}.mlp.fc.w" [width, 4·width] /.b, "h{l}.mlp.proj.w" [4·width, width] /.b,
// then "lnf.w", "lnf.b". Matrices are stored input-major (y = x·W + b).
#pragma once

#include <memory>
#include <vector>

#include "inner/models/model.h"

namespace geoloco::inner {

struct GptOptions {
  std::size_t vocab = 256;   ///< token ids are bytes, >= 2
  std::size_t context = 64;  ///< positions per sample (sequence length), >= 1
  std::size_t width = 128;   ///< embedding width, divisible by heads
  std::size_t layers = 4;    ///< transformer blocks, >= 1
  std::size_t heads = 4;     ///< attention heads, >= 1

  /// Errors: invalid_argument naming the broken rule.
  Status validate() const;
};

class Gpt final : public Model {
 public:
  /// Errors: invalid_argument (options).
  static Result<std::unique_ptr<Gpt>> create(const GptOptions& options);

  std::string name() const override { return "gpt"; }
  const ParamLayout& layout() const override { return layout_; }
  const GptOptions& options() const { return options_; }
  void init(std::span<float> params, std::uint64_t seed) const override;
  Result<double> forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) override;
  Result<EvalResult> evaluate(std::span<const float> params, const Batch& batch) override;
  std::size_t work_units(const Batch& batch) const override { return batch.samples * options_.context; }
  std::string work_unit_name() const override { return "tokens"; }
  double train_flops(std::size_t samples) const override;
  GemmShape largest_gemm(std::size_t samples) const override;
  std::vector<std::pair<std::size_t, std::size_t>> decay_ranges() const override;

 private:
  explicit Gpt(const GptOptions& options);
  Status check(std::span<const float> params, const Batch& batch) const;
  /// Runs the network on the batch; leaves logits_ (and everything the
  /// backward pass needs) filled.
  void forward(std::span<const float> params, const Batch& batch);

  // Offsets of one block's tensors in the flat buffer.
  struct Block {
    std::size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  // One block's saved activations (rows = samples × context).
  struct BlockActs {
    std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, atty, att, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
        residual3;
  };

  GptOptions options_;
  ParamLayout layout_;
  std::size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<Block> blocks_;

  std::size_t batch_ = 0;  // samples the activations are sized for
  std::vector<float> encoded_;
  std::vector<BlockActs> acts_;
  std::vector<float> lnf_, lnf_mean_, lnf_rstd_, logits_, probs_;
  // Backward scratch.
  std::vector<float> d_residual_, d_ln_, d_qkv_, d_atty_, d_fch_, d_fch_gelu_, d_logits_, d_scratch_, tmp_;
};

}  // namespace geoloco::inner
