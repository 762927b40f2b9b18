// The `gpt` language model on the device: inner/models/gpt.cpp, op for op.
#include <vector>

#include "inner/cuda/activations.cuh"
#include "inner/cuda/attention.cuh"
#include "inner/cuda/bias.cuh"
#include "inner/cuda/cross_entropy.cuh"
#include "inner/cuda/embedding.cuh"
#include "inner/cuda/layernorm.cuh"
#include "inner/cuda/matmul.h"
#include "inner/cuda/residual.cuh"
#include "inner/cuda/runners.h"

namespace geoloco::inner::cuda {

namespace {

// Offsets of one block's tensors in the flat buffer (as Gpt::Block).
struct Block {
  std::size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

// One block's saved activations, rows = samples × context (as Gpt::BlockActs).
struct BlockActs {
  DeviceBuffer<float> ln1, ln1_mean, ln1_rstd, qkv, atty, att, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
      residual3;
};

class DeviceGpt final : public DeviceModel {
 public:
  DeviceGpt(Context& ctx, ParamLayout layout, GptOptions options, std::size_t wte, std::size_t wpe,
            std::vector<Block> blocks, std::size_t lnf_w, std::size_t lnf_b)
      : ctx_(ctx),
        layout_(std::move(layout)),
        o_(options),
        wte_(wte),
        wpe_(wpe),
        lnf_w_(lnf_w),
        lnf_b_(lnf_b),
        blocks_(std::move(blocks)),
        acts_(o_.layers) {}

  std::string name() const override { return "gpt"; }
  const ParamLayout& layout() const override { return layout_; }

  Status upload(const Batch& batch) override {
    const std::size_t n = batch.samples * o_.context;
    GEOLOCO_RETURN_IF(batch.samples == 0, Err::invalid_argument, "gpt: empty batch");
    GEOLOCO_RETURN_IF(batch.tokens.size() != n || batch.targets.size() != n, Err::invalid_argument, "gpt: batch has ",
                      batch.tokens.size(), " tokens and ", batch.targets.size(), " targets, expected samples (",
                      batch.samples, ") x context (", o_.context, ")");
    for (std::size_t i = 0; i < n; ++i) {
      GEOLOCO_RETURN_IF(batch.tokens[i] < 0 || static_cast<std::size_t>(batch.tokens[i]) >= o_.vocab,
                        Err::invalid_argument, "gpt: token ", batch.tokens[i], " outside [0, ", o_.vocab, ")");
      GEOLOCO_RETURN_IF(batch.targets[i] < 0 || static_cast<std::size_t>(batch.targets[i]) >= o_.vocab,
                        Err::invalid_argument, "gpt: target ", batch.targets[i], " outside [0, ", o_.vocab, ")");
    }
    if (batch.samples != batch_) GEOLOCO_TRY(size_for(batch.samples));
    const TokenIndex index = build_token_index(batch.tokens, o_.vocab);
    GEOLOCO_TRY(tokens_.assign(batch.tokens, ctx_.stream()));
    GEOLOCO_TRY(targets_.assign(batch.targets, ctx_.stream()));
    GEOLOCO_TRY(token_offsets_.assign(index.offsets, ctx_.stream()));
    return token_positions_.assign(index.positions, ctx_.stream());
  }

  Result<double> forward_backward(const float* p, float* g) override {
    GEOLOCO_RETURN_IF(batch_ == 0, Err::invalid_argument, "gpt: no batch uploaded");
    const std::size_t B = batch_, T = o_.context, C = o_.width, V = o_.vocab, H = o_.heads, N = B * T;
    Context& x = ctx_;
    GEOLOCO_TRY(forward(p));
    GEOLOCO_TRY(cross_entropy_forward(x, probs_.data(), loss_.data(), logits_.data(), targets_.data(), N, V));

    GEOLOCO_TRY(zero(g, layout_.total()));
    GEOLOCO_TRY(d_logits_.zero(x.stream()));
    GEOLOCO_TRY(cross_entropy_backward(x, d_logits_.data(), probs_.data(), targets_.data(), N, V));
    GEOLOCO_TRY(d_ln_.zero(x.stream()));
    GEOLOCO_TRY(matmul_nt_backward(x, d_ln_.data(), g + wte_, d_logits_.data(), lnf_.data(), p + wte_, N, C, V));
    // d_residual_ carries d(loss)/d(residual stream) down through the blocks;
    // every branch that reads the stream adds its share into it.
    GEOLOCO_TRY(d_residual_.zero(x.stream()));
    const float* last = acts_.back().residual3.data();
    GEOLOCO_TRY(layernorm_backward(x, d_residual_.data(), g + lnf_w_, g + lnf_b_, d_ln_.data(), last, p + lnf_w_,
                                   lnf_mean_.data(), lnf_rstd_.data(), N, C));
    for (std::size_t l = o_.layers; l-- > 0;) {
      const Block& w = blocks_[l];
      BlockActs& a = acts_[l];
      const float* residual_in = l == 0 ? encoded_.data() : acts_[l - 1].residual3.data();
      // residual3 = residual2 + mlp(...): the MLP branch sees d_residual as its output gradient.
      GEOLOCO_TRY(d_fch_gelu_.zero(x.stream()));
      GEOLOCO_TRY(matmul_backward(x, d_fch_gelu_.data(), g + w.fcproj_w, d_residual_.data(), a.fch_gelu.data(),
                                  p + w.fcproj_w, N, 4 * C, C));
      GEOLOCO_TRY(bias_backward(x, g + w.fcproj_b, d_residual_.data(), N, C));
      GEOLOCO_TRY(d_fch_.zero(x.stream()));
      GEOLOCO_TRY(gelu_backward(x, d_fch_.data(), d_fch_gelu_.data(), a.fch.data(), N * 4 * C));
      GEOLOCO_TRY(d_ln_.zero(x.stream()));
      GEOLOCO_TRY(matmul_backward(x, d_ln_.data(), g + w.fc_w, d_fch_.data(), a.ln2.data(), p + w.fc_w, N, C, 4 * C));
      GEOLOCO_TRY(bias_backward(x, g + w.fc_b, d_fch_.data(), N, 4 * C));
      GEOLOCO_TRY(layernorm_backward(x, d_residual_.data(), g + w.ln2_w, g + w.ln2_b, d_ln_.data(), a.residual2.data(),
                                     p + w.ln2_w, a.ln2_mean.data(), a.ln2_rstd.data(), N, C));
      // residual2 = residual_in + attention(...): same pattern.
      GEOLOCO_TRY(d_atty_.zero(x.stream()));
      GEOLOCO_TRY(
          matmul_backward(x, d_atty_.data(), g + w.proj_w, d_residual_.data(), a.atty.data(), p + w.proj_w, N, C, C));
      GEOLOCO_TRY(bias_backward(x, g + w.proj_b, d_residual_.data(), N, C));
      GEOLOCO_TRY(d_qkv_.zero(x.stream()));
      GEOLOCO_TRY(attention_backward(x, d_qkv_.data(), d_atty_.data(), a.qkv.data(), a.att.data(), B, T, C, H));
      GEOLOCO_TRY(d_ln_.zero(x.stream()));
      GEOLOCO_TRY(matmul_backward(x, d_ln_.data(), g + w.qkv_w, d_qkv_.data(), a.ln1.data(), p + w.qkv_w, N, C, 3 * C));
      GEOLOCO_TRY(bias_backward(x, g + w.qkv_b, d_qkv_.data(), N, 3 * C));
      GEOLOCO_TRY(layernorm_backward(x, d_residual_.data(), g + w.ln1_w, g + w.ln1_b, d_ln_.data(), residual_in,
                                     p + w.ln1_w, a.ln1_mean.data(), a.ln1_rstd.data(), N, C));
    }
    GEOLOCO_TRY(embedding_backward(x, g + wte_, g + wpe_, d_residual_.data(), token_offsets_.data(),
                                   token_positions_.data(), V, B, T, C));
    double loss = 0.0;
    GEOLOCO_TRY(loss_.copy_to(std::span<double>(&loss, 1), x.stream()));
    return loss;
  }

  Result<EvalResult> evaluate(const float* p) override {
    GEOLOCO_RETURN_IF(batch_ == 0, Err::invalid_argument, "gpt: no batch uploaded");
    const std::size_t N = batch_ * o_.context;
    GEOLOCO_TRY(forward(p));
    GEOLOCO_TRY(cross_entropy_forward(ctx_, probs_.data(), loss_.data(), logits_.data(), targets_.data(), N, o_.vocab));
    GEOLOCO_TRY(correct_.zero(ctx_.stream()));
    GEOLOCO_TRY(count_correct(ctx_, correct_.data(), logits_.data(), targets_.data(), N, o_.vocab));
    return read_eval(ctx_, loss_, correct_, N);
  }

 private:
  Status zero(float* p, std::size_t n) {
    GEOLOCO_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), ctx_.stream()));
    return {};
  }

  Status size_for(std::size_t B) {
    batch_ = 0;
    const std::size_t T = o_.context, C = o_.width, V = o_.vocab, H = o_.heads, N = B * T;
    GEOLOCO_TRY(encoded_.allocate(N * C));
    for (BlockActs& a : acts_) {
      GEOLOCO_TRY(a.ln1.allocate(N * C));
      GEOLOCO_TRY(a.ln1_mean.allocate(N));
      GEOLOCO_TRY(a.ln1_rstd.allocate(N));
      GEOLOCO_TRY(a.qkv.allocate(N * 3 * C));
      GEOLOCO_TRY(a.atty.allocate(N * C));
      GEOLOCO_TRY(a.att.allocate(B * H * T * T));
      GEOLOCO_TRY(a.residual2.allocate(N * C));
      GEOLOCO_TRY(a.ln2.allocate(N * C));
      GEOLOCO_TRY(a.ln2_mean.allocate(N));
      GEOLOCO_TRY(a.ln2_rstd.allocate(N));
      GEOLOCO_TRY(a.fch.allocate(N * 4 * C));
      GEOLOCO_TRY(a.fch_gelu.allocate(N * 4 * C));
      GEOLOCO_TRY(a.residual3.allocate(N * C));
    }
    GEOLOCO_TRY(lnf_.allocate(N * C));
    GEOLOCO_TRY(lnf_mean_.allocate(N));
    GEOLOCO_TRY(lnf_rstd_.allocate(N));
    GEOLOCO_TRY(logits_.allocate(N * V));
    GEOLOCO_TRY(probs_.allocate(N * V));
    GEOLOCO_TRY(tmp_.allocate(N * C));
    GEOLOCO_TRY(d_residual_.allocate(N * C));
    GEOLOCO_TRY(d_ln_.allocate(N * C));
    GEOLOCO_TRY(d_qkv_.allocate(N * 3 * C));
    GEOLOCO_TRY(d_atty_.allocate(N * C));
    GEOLOCO_TRY(d_fch_.allocate(N * 4 * C));
    GEOLOCO_TRY(d_fch_gelu_.allocate(N * 4 * C));
    GEOLOCO_TRY(d_logits_.allocate(N * V));
    GEOLOCO_TRY(loss_.allocate(1));
    GEOLOCO_TRY(correct_.allocate(1));
    batch_ = B;
    return {};
  }

  /// Runs the network on the uploaded batch; leaves logits_ (and everything
  /// the backward pass needs) filled.
  Status forward(const float* p) {
    const std::size_t B = batch_, T = o_.context, C = o_.width, V = o_.vocab, H = o_.heads, N = B * T;
    Context& x = ctx_;
    GEOLOCO_TRY(embedding_forward(x, encoded_.data(), tokens_.data(), p + wte_, p + wpe_, B, T, C));
    const float* residual = encoded_.data();
    for (std::size_t l = 0; l < o_.layers; ++l) {
      const Block& w = blocks_[l];
      BlockActs& a = acts_[l];
      GEOLOCO_TRY(layernorm_forward(x, a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual, p + w.ln1_w,
                                    p + w.ln1_b, N, C));
      GEOLOCO_TRY(matmul_forward(x, a.qkv.data(), a.ln1.data(), p + w.qkv_w, N, C, 3 * C));
      GEOLOCO_TRY(bias_forward(x, a.qkv.data(), p + w.qkv_b, N, 3 * C));
      GEOLOCO_TRY(attention_forward(x, a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, H));
      GEOLOCO_TRY(matmul_forward(x, tmp_.data(), a.atty.data(), p + w.proj_w, N, C, C));
      GEOLOCO_TRY(bias_forward(x, tmp_.data(), p + w.proj_b, N, C));
      GEOLOCO_TRY(residual_forward(x, a.residual2.data(), residual, tmp_.data(), N * C));
      GEOLOCO_TRY(layernorm_forward(x, a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(),
                                    p + w.ln2_w, p + w.ln2_b, N, C));
      GEOLOCO_TRY(matmul_forward(x, a.fch.data(), a.ln2.data(), p + w.fc_w, N, C, 4 * C));
      GEOLOCO_TRY(bias_forward(x, a.fch.data(), p + w.fc_b, N, 4 * C));
      GEOLOCO_TRY(gelu_forward(x, a.fch_gelu.data(), a.fch.data(), N * 4 * C));
      GEOLOCO_TRY(matmul_forward(x, tmp_.data(), a.fch_gelu.data(), p + w.fcproj_w, N, 4 * C, C));
      GEOLOCO_TRY(bias_forward(x, tmp_.data(), p + w.fcproj_b, N, C));
      GEOLOCO_TRY(residual_forward(x, a.residual3.data(), a.residual2.data(), tmp_.data(), N * C));
      residual = a.residual3.data();
    }
    GEOLOCO_TRY(
        layernorm_forward(x, lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual, p + lnf_w_, p + lnf_b_, N, C));
    return matmul_nt_forward(x, logits_.data(), lnf_.data(), p + wte_, N, C, V);  // the tied head
  }

  Context& ctx_;
  ParamLayout layout_;
  GptOptions o_;
  std::size_t wte_, wpe_, lnf_w_, lnf_b_;
  std::vector<Block> blocks_;

  std::size_t batch_ = 0;  // samples the activations are sized for
  DeviceBuffer<std::int32_t> tokens_, targets_, token_offsets_, token_positions_;
  DeviceBuffer<float> encoded_;
  std::vector<BlockActs> acts_;
  DeviceBuffer<float> lnf_, lnf_mean_, lnf_rstd_, logits_, probs_, tmp_;
  DeviceBuffer<float> d_residual_, d_ln_, d_qkv_, d_atty_, d_fch_, d_fch_gelu_, d_logits_;
  DeviceBuffer<double> loss_;
  DeviceBuffer<unsigned long long> correct_;
};

}  // namespace

Result<std::unique_ptr<DeviceModel>> make_device_gpt(Context& ctx, const ParamLayout& layout,
                                                     const GptOptions& options) {
  Status missing;
  const auto at = [&](const std::string& name) -> std::size_t {
    const TensorDesc* t = layout.find(name);
    if (t == nullptr) {
      if (missing.ok()) missing = GEOLOCO_ERROR(Err::internal, "gpt: the layout has no tensor ", name);
      return 0;
    }
    return t->offset;
  };
  std::vector<Block> blocks;
  for (std::size_t l = 0; l < options.layers; ++l) {
    const std::string h = cat("h", l, ".");
    blocks.push_back(Block{at(h + "ln1.w"), at(h + "ln1.b"), at(h + "attn.qkv.w"), at(h + "attn.qkv.b"),
                           at(h + "attn.proj.w"), at(h + "attn.proj.b"), at(h + "ln2.w"), at(h + "ln2.b"),
                           at(h + "mlp.fc.w"), at(h + "mlp.fc.b"), at(h + "mlp.proj.w"), at(h + "mlp.proj.b")});
  }
  const std::size_t wte = at("wte"), wpe = at("wpe"), lnf_w = at("lnf.w"), lnf_b = at("lnf.b");
  GEOLOCO_TRY(missing);
  return std::unique_ptr<DeviceModel>(new DeviceGpt(ctx, layout, options, wte, wpe, std::move(blocks), lnf_w, lnf_b));
}

}  // namespace geoloco::inner::cuda
