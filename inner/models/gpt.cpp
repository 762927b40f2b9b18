#include "inner/models/gpt.h"

#include <algorithm>
#include <cmath>

#include "inner/cpu/activations.h"
#include "inner/cpu/attention.h"
#include "inner/cpu/bias.h"
#include "inner/cpu/cross_entropy.h"
#include "inner/cpu/embedding.h"
#include "inner/cpu/layernorm.h"
#include "inner/cpu/matmul.h"
#include "inner/rng.h"

namespace geoloco::inner {

Status GptOptions::validate() const {
  GEOLOCO_RETURN_IF(vocab < 2, Err::invalid_argument, "gpt: vocab must be >= 2, got ", vocab);
  GEOLOCO_RETURN_IF(context < 1, Err::invalid_argument, "gpt: context must be >= 1");
  GEOLOCO_RETURN_IF(layers < 1, Err::invalid_argument, "gpt: layers must be >= 1");
  GEOLOCO_RETURN_IF(heads < 1, Err::invalid_argument, "gpt: heads must be >= 1");
  GEOLOCO_RETURN_IF(width < 1 || width % heads != 0, Err::invalid_argument, "gpt: width (", width,
                    ") must be a positive multiple of heads (", heads, ")");
  // sgemm takes int sizes: keep every product's dimensions well inside them.
  GEOLOCO_RETURN_IF(width > (1u << 16) || context > (1u << 16) || vocab > (1u << 20), Err::invalid_argument,
                    "gpt: width <= 65536, context <= 65536 and vocab <= 2^20 are supported");
  return {};
}

Result<std::unique_ptr<Gpt>> Gpt::create(const GptOptions& options) {
  GEOLOCO_TRY(options.validate());
  return std::unique_ptr<Gpt>(new Gpt(options));
}

Gpt::Gpt(const GptOptions& o) : options_(o) {
  const std::size_t c = o.width;
  wte_ = layout_.add("wte", {o.vocab, c});
  wpe_ = layout_.add("wpe", {o.context, c});
  for (std::size_t l = 0; l < o.layers; ++l) {
    const std::string p = cat("h", l, ".");
    Block b{};
    b.ln1_w = layout_.add(p + "ln1.w", {c});
    b.ln1_b = layout_.add(p + "ln1.b", {c});
    b.qkv_w = layout_.add(p + "attn.qkv.w", {c, 3 * c});
    b.qkv_b = layout_.add(p + "attn.qkv.b", {3 * c});
    b.proj_w = layout_.add(p + "attn.proj.w", {c, c});
    b.proj_b = layout_.add(p + "attn.proj.b", {c});
    b.ln2_w = layout_.add(p + "ln2.w", {c});
    b.ln2_b = layout_.add(p + "ln2.b", {c});
    b.fc_w = layout_.add(p + "mlp.fc.w", {c, 4 * c});
    b.fc_b = layout_.add(p + "mlp.fc.b", {4 * c});
    b.fcproj_w = layout_.add(p + "mlp.proj.w", {4 * c, c});
    b.fcproj_b = layout_.add(p + "mlp.proj.b", {c});
    blocks_.push_back(b);
  }
  lnf_w_ = layout_.add("lnf.w", {c});
  lnf_b_ = layout_.add("lnf.b", {c});
  acts_.resize(o.layers);
}

void Gpt::init(std::span<float> params, std::uint64_t seed) const {
  // GPT-2's initialization: N(0, 0.02) matrices, N(0, 0.01) positions, the
  // two projections that write into the residual stream scaled by 1/√(2L) so
  // its variance does not grow with depth; biases 0, layernorm gains 1.
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(options_.layers));
  for (std::size_t i = 0; i < layout_.tensors().size(); ++i) {
    const TensorDesc& t = layout_.tensors()[i];
    std::span<float> v = layout_.view(params, t);
    const std::string& n = t.name;
    auto ends_with = [&](std::string_view s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    Rng rng(seed, i);
    if (ends_with("ln1.w") || ends_with("ln2.w") || n == "lnf.w") {
      std::fill(v.begin(), v.end(), 1.0f);
    } else if (t.shape.size() == 1) {
      std::fill(v.begin(), v.end(), 0.0f);
    } else {
      double std = 0.02;
      if (n == "wpe") std = 0.01;
      if (ends_with("attn.proj.w") || ends_with("mlp.proj.w")) std = residual_std;
      for (float& x : v) x = static_cast<float>(std * rng.normal());
    }
  }
}

Status Gpt::check(std::span<const float> params, const Batch& batch) const {
  GEOLOCO_RETURN_IF(params.size() != layout_.total(), Err::invalid_argument, "gpt: ", params.size(),
                    " parameters given, the layout has ", layout_.total());
  GEOLOCO_RETURN_IF(batch.samples == 0, Err::invalid_argument, "gpt: empty batch");
  const std::size_t n = batch.samples * options_.context;
  GEOLOCO_RETURN_IF(batch.tokens.size() != n || batch.targets.size() != n, Err::invalid_argument, "gpt: batch has ",
                    batch.tokens.size(), " tokens and ", batch.targets.size(), " targets, expected samples (",
                    batch.samples, ") x context (", options_.context, ") of each");
  for (std::size_t i = 0; i < n; ++i) {
    GEOLOCO_RETURN_IF(batch.tokens[i] < 0 || static_cast<std::size_t>(batch.tokens[i]) >= options_.vocab,
                      Err::invalid_argument, "gpt: token ", batch.tokens[i], " outside [0, ", options_.vocab, ")");
    GEOLOCO_RETURN_IF(batch.targets[i] < 0 || static_cast<std::size_t>(batch.targets[i]) >= options_.vocab,
                      Err::invalid_argument, "gpt: target ", batch.targets[i], " outside [0, ", options_.vocab, ")");
  }
  return {};
}

void Gpt::forward(std::span<const float> params, const Batch& batch) {
  const std::size_t B = batch.samples, T = options_.context, C = options_.width, V = options_.vocab;
  const std::size_t H = options_.heads, N = B * T;
  const float* p = params.data();
  if (batch_ != B) {  // size the activations once per batch size
    batch_ = B;
    encoded_.resize(N * C);
    for (BlockActs& a : acts_) {
      a.ln1.resize(N * C), a.ln1_mean.resize(N), a.ln1_rstd.resize(N), a.qkv.resize(N * 3 * C);
      a.atty.resize(N * C), a.att.resize(B * H * T * T), a.residual2.resize(N * C), a.ln2.resize(N * C);
      a.ln2_mean.resize(N), a.ln2_rstd.resize(N), a.fch.resize(N * 4 * C), a.fch_gelu.resize(N * 4 * C);
      a.residual3.resize(N * C);
    }
    lnf_.resize(N * C), lnf_mean_.resize(N), lnf_rstd_.resize(N), logits_.resize(N * V), probs_.resize(N * V);
    tmp_.resize(N * C);
  }
  cpu::embedding_forward(encoded_.data(), batch.tokens.data(), p + wte_, p + wpe_, B, T, C);
  const float* residual = encoded_.data();
  for (std::size_t l = 0; l < options_.layers; ++l) {
    const Block& w = blocks_[l];
    BlockActs& a = acts_[l];
    cpu::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual, p + w.ln1_w, p + w.ln1_b, N,
                           C);
    cpu::matmul_forward(a.qkv.data(), a.ln1.data(), p + w.qkv_w, N, C, 3 * C);
    cpu::bias_forward(a.qkv.data(), p + w.qkv_b, N, 3 * C);
    cpu::attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, H);
    cpu::matmul_forward(tmp_.data(), a.atty.data(), p + w.proj_w, N, C, C);
    cpu::bias_forward(tmp_.data(), p + w.proj_b, N, C);
    for (std::size_t i = 0; i < N * C; ++i) a.residual2[i] = residual[i] + tmp_[i];
    cpu::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(), p + w.ln2_w,
                           p + w.ln2_b, N, C);
    cpu::matmul_forward(a.fch.data(), a.ln2.data(), p + w.fc_w, N, C, 4 * C);
    cpu::bias_forward(a.fch.data(), p + w.fc_b, N, 4 * C);
    cpu::gelu_forward(a.fch_gelu.data(), a.fch.data(), N * 4 * C);
    cpu::matmul_forward(tmp_.data(), a.fch_gelu.data(), p + w.fcproj_w, N, 4 * C, C);
    cpu::bias_forward(tmp_.data(), p + w.fcproj_b, N, C);
    for (std::size_t i = 0; i < N * C; ++i) a.residual3[i] = a.residual2[i] + tmp_[i];
    residual = a.residual3.data();
  }
  cpu::layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), residual, p + lnf_w_, p + lnf_b_, N, C);
  cpu::matmul_nt_forward(logits_.data(), lnf_.data(), p + wte_, N, C, V);  // the tied head
}

Result<double> Gpt::forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) {
  GEOLOCO_TRY(check(params, batch));
  GEOLOCO_RETURN_IF(grads.size() != layout_.total(), Err::invalid_argument, "gpt: ", grads.size(),
                    " gradients given, the layout has ", layout_.total());
  const std::size_t B = batch.samples, T = options_.context, C = options_.width, V = options_.vocab;
  const std::size_t H = options_.heads, N = B * T;
  forward(params, batch);
  const double loss = cpu::cross_entropy_forward(probs_.data(), logits_.data(), batch.targets.data(), N, V);

  const float* p = params.data();
  float* g = grads.data();
  std::fill(grads.begin(), grads.end(), 0.0f);
  d_logits_.assign(N * V, 0.0f);
  cpu::cross_entropy_backward(d_logits_.data(), probs_.data(), batch.targets.data(), N, V);
  d_ln_.assign(N * C, 0.0f);
  cpu::matmul_nt_backward(d_ln_.data(), g + wte_, d_logits_.data(), lnf_.data(), p + wte_, N, C, V);
  // d_residual_ carries d(loss)/d(residual stream) down through the blocks;
  // every branch that reads the stream adds its share into it.
  d_residual_.assign(N * C, 0.0f);
  const float* last = options_.layers > 0 ? acts_.back().residual3.data() : encoded_.data();
  cpu::layernorm_backward(d_residual_.data(), g + lnf_w_, g + lnf_b_, d_ln_.data(), last, p + lnf_w_, lnf_mean_.data(),
                          lnf_rstd_.data(), N, C);
  d_scratch_.resize(T * T);
  for (std::size_t l = options_.layers; l-- > 0;) {
    const Block& w = blocks_[l];
    BlockActs& a = acts_[l];
    const float* residual_in = l == 0 ? encoded_.data() : acts_[l - 1].residual3.data();
    // residual3 = residual2 + mlp(...): the MLP branch sees d_residual as its output gradient.
    d_fch_gelu_.assign(N * 4 * C, 0.0f);
    cpu::matmul_backward(d_fch_gelu_.data(), g + w.fcproj_w, d_residual_.data(), a.fch_gelu.data(), p + w.fcproj_w, N,
                         4 * C, C);
    cpu::bias_backward(g + w.fcproj_b, d_residual_.data(), N, C);
    d_fch_.assign(N * 4 * C, 0.0f);
    cpu::gelu_backward(d_fch_.data(), d_fch_gelu_.data(), a.fch.data(), N * 4 * C);
    d_ln_.assign(N * C, 0.0f);
    cpu::matmul_backward(d_ln_.data(), g + w.fc_w, d_fch_.data(), a.ln2.data(), p + w.fc_w, N, C, 4 * C);
    cpu::bias_backward(g + w.fc_b, d_fch_.data(), N, 4 * C);
    cpu::layernorm_backward(d_residual_.data(), g + w.ln2_w, g + w.ln2_b, d_ln_.data(), a.residual2.data(), p + w.ln2_w,
                            a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
    // residual2 = residual_in + attention(...): same pattern.
    d_atty_.assign(N * C, 0.0f);
    cpu::matmul_backward(d_atty_.data(), g + w.proj_w, d_residual_.data(), a.atty.data(), p + w.proj_w, N, C, C);
    cpu::bias_backward(g + w.proj_b, d_residual_.data(), N, C);
    d_qkv_.assign(N * 3 * C, 0.0f);
    cpu::attention_backward(d_qkv_.data(), d_scratch_.data(), d_atty_.data(), a.qkv.data(), a.att.data(), B, T, C, H);
    d_ln_.assign(N * C, 0.0f);
    cpu::matmul_backward(d_ln_.data(), g + w.qkv_w, d_qkv_.data(), a.ln1.data(), p + w.qkv_w, N, C, 3 * C);
    cpu::bias_backward(g + w.qkv_b, d_qkv_.data(), N, 3 * C);
    cpu::layernorm_backward(d_residual_.data(), g + w.ln1_w, g + w.ln1_b, d_ln_.data(), residual_in, p + w.ln1_w,
                            a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
  }
  cpu::embedding_backward(g + wte_, g + wpe_, d_residual_.data(), batch.tokens.data(), B, T, C);
  return loss;
}

Result<EvalResult> Gpt::evaluate(std::span<const float> params, const Batch& batch) {
  GEOLOCO_TRY(check(params, batch));
  const std::size_t N = batch.samples * options_.context;
  forward(params, batch);
  EvalResult r;
  r.loss = cpu::cross_entropy_forward(probs_.data(), logits_.data(), batch.targets.data(), N, options_.vocab);
  r.correct = cpu::count_correct(logits_.data(), batch.targets.data(), N, options_.vocab);
  r.predictions = N;
  return r;
}

double Gpt::train_flops(std::size_t samples) const {
  const double C = static_cast<double>(options_.width), T = static_cast<double>(options_.context);
  const double V = static_cast<double>(options_.vocab), L = static_cast<double>(options_.layers);
  // Per token, forward: qkv 6C², proj 2C², fc 8C², fc_proj 8C² (= 24C² per
  // block), attention scores and weighted sum 4·T·C per block (the full T×T
  // square, which is what the code computes), and the head 2·C·V.
  const double forward_per_token = L * (24.0 * C * C + 4.0 * T * C) + 2.0 * C * V;
  return 3.0 * forward_per_token * T * static_cast<double>(samples);
}

GemmShape Gpt::largest_gemm(std::size_t samples) const {
  // The MLP's first product, rows × width times width × 4·width.
  return {samples * options_.context, options_.width, 4 * options_.width};
}

std::vector<std::pair<std::size_t, std::size_t>> Gpt::decay_ranges() const {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (const TensorDesc& t : layout_.tensors())
    if (t.shape.size() == 2 && t.name != "wpe") ranges.emplace_back(t.offset, t.offset + t.size());
  return ranges;
}

}  // namespace geoloco::inner
