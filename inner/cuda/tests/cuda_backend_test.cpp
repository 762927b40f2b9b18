// The CUDA backend against the CPU reference: every op forward and
// backward, the mlp and gpt runners (loss, every gradient tensor, evaluation,
// a few AdamW training steps), and the NCCL collective with one rank.
//
// Comparisons are `|got − ref| <= atol + rtol·|ref|` per element, or NMSE
// (Σ(got − ref)² / Σref²) per tensor where a whole model's rounding adds up;
// each check names its tolerance and why. Ops whose GPU code adds in the
// reference's order (embedding) or is compiled to round as it does (AdamW)
// are required to match bit for bit.
//
// Without a GPU (no device, or no driver) every test case WARNs
// "SKIPPED: no CUDA device" and returns (gpu_test.h); ctest turns that line
// into a skipped test (SKIP_REGULAR_EXPRESSION), so CI shows it rather than
// a pass. The device trainer's cases are in device_trainer_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "inner/collective/launch.h"
#include "inner/cpu/activations.h"
#include "inner/cpu/adamw.h"
#include "inner/cpu/attention.h"
#include "inner/cpu/bias.h"
#include "inner/cpu/blas.h"
#include "inner/cpu/cross_entropy.h"
#include "inner/cpu/embedding.h"
#include "inner/cpu/layernorm.h"
#include "inner/cpu/matmul.h"
#include "inner/cuda/activations.cuh"
#include "inner/cuda/adamw.cuh"
#include "inner/cuda/attention.cuh"
#include "inner/cuda/bias.cuh"
#include "inner/cuda/cuda_model.h"
#include "inner/cuda/cross_entropy.cuh"
#include "inner/cuda/device.h"
#include "inner/cuda/device_model.h"
#include "inner/cuda/embedding.cuh"
#include "inner/cuda/layernorm.cuh"
#include "inner/cuda/matmul.h"
#include "inner/cuda/nccl_collective.h"
#include "inner/cuda/residual.cuh"
#include "inner/cuda/tests/gpu_test.h"
#include "inner/models/gpt.h"
#include "inner/models/mlp.h"
#include "inner/rng.h"

using namespace geoloco;
using namespace geoloco::inner;
namespace gpu = geoloco::inner::cuda;
using gpu::testing::gpu_or_skip;
using gpu::testing::nmse;
using gpu::testing::ok;

namespace {

std::vector<float> randn(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

std::vector<std::int32_t> randint(std::size_t n, std::uint64_t seed, std::size_t below) {
  Rng rng(seed);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(rng.below(below));
  return v;
}

template <class T>
gpu::DeviceBuffer<T> up(gpu::Context& ctx, const std::vector<T>& host) {
  gpu::DeviceBuffer<T> d;
  const Status s = d.assign(host, ctx.stream());
  INFO(s.to_string());
  REQUIRE(s.ok());
  return d;
}

template <class T>
std::vector<T> down(gpu::Context& ctx, const gpu::DeviceBuffer<T>& d) {
  std::vector<T> host(d.size());
  const Status s = d.copy_to(host, ctx.stream());
  INFO(s.to_string());
  REQUIRE(s.ok());
  return host;
}

/// Every element within atol + rtol·|ref|; reports the worst one.
void require_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref, double atol,
                   double rtol) {
  REQUIRE(got.size() == ref.size());
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    const double bound = atol + rtol * std::abs(static_cast<double>(ref[i]));
    if (!(err <= bound)) ++bad;
    if (!(err - bound <= worst_excess)) worst_excess = err - bound, worst = i;
  }
  INFO(what << ": " << bad << " of " << ref.size() << " elements outside atol " << atol << " + rtol " << rtol
            << "·|ref|; worst at " << worst << ": got " << got[worst] << ", ref " << ref[worst]);
  REQUIRE(bad == 0);
}

void require_equal(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i)
    if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0 && bad++ == 0) first = i;
  INFO(what << ": " << bad << " of " << ref.size() << " elements differ in their bits; first at " << first << ": got "
            << got[first] << ", ref " << ref[first]);
  REQUIRE(bad == 0);
}

}  // namespace

TEST_CASE("cuda matmul (cuBLAS) matches the OpenBLAS reference", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  cpu::set_blas_threads(1);
  // Odd sizes: no dimension a multiple of a tile.
  const std::size_t n = 37, k = 53, m = 29;
  const auto in = randn(n * k, 1), w = randn(k * m, 2), wt = randn(m * k, 3), dy = randn(n * m, 4);
  const auto din0 = randn(n * k, 5), dw0 = randn(k * m, 6);  // backward accumulates: start from non-zero
  auto d_in = up(*ctx, in), d_w = up(*ctx, w), d_wt = up(*ctx, wt), d_dy = up(*ctx, dy);
  gpu::DeviceBuffer<float> d_out;
  ok(d_out.allocate(n * m));

  // fp32 products of length ≤ 53 of N(0,1) values: both libraries round each
  // partial sum to fp32 in different orders, ~1e-6 relative to √k.
  const double atol = 1e-4, rtol = 1e-4;
  std::vector<float> ref(n * m);
  cpu::matmul_forward(ref.data(), in.data(), w.data(), n, k, m);
  ok(gpu::matmul_forward(*ctx, d_out.data(), d_in.data(), d_w.data(), n, k, m));
  require_close("matmul_forward", down(*ctx, d_out), ref, atol, rtol);

  cpu::matmul_nt_forward(ref.data(), in.data(), wt.data(), n, k, m);
  ok(gpu::matmul_nt_forward(*ctx, d_out.data(), d_in.data(), d_wt.data(), n, k, m));
  require_close("matmul_nt_forward", down(*ctx, d_out), ref, atol, rtol);

  {
    auto ref_din = din0, ref_dw = dw0;
    cpu::matmul_backward(ref_din.data(), ref_dw.data(), dy.data(), in.data(), w.data(), n, k, m);
    auto g_din = up(*ctx, din0), g_dw = up(*ctx, dw0);
    ok(gpu::matmul_backward(*ctx, g_din.data(), g_dw.data(), d_dy.data(), d_in.data(), d_w.data(), n, k, m));
    require_close("matmul_backward d_in", down(*ctx, g_din), ref_din, atol, rtol);
    require_close("matmul_backward d_w", down(*ctx, g_dw), ref_dw, atol, rtol);
  }
  {
    const auto dwt0 = randn(m * k, 7);
    auto ref_din = din0, ref_dw = dwt0;
    cpu::matmul_nt_backward(ref_din.data(), ref_dw.data(), dy.data(), in.data(), wt.data(), n, k, m);
    auto g_din = up(*ctx, din0), g_dw = up(*ctx, dwt0);
    ok(gpu::matmul_nt_backward(*ctx, g_din.data(), g_dw.data(), d_dy.data(), d_in.data(), d_wt.data(), n, k, m));
    require_close("matmul_nt_backward d_in", down(*ctx, g_din), ref_din, atol, rtol);
    require_close("matmul_nt_backward d_w", down(*ctx, g_dw), ref_dw, atol, rtol);
  }
  {
    // TF32 keeps 10 mantissa bits of each input (relative error ~5e-4 per
    // product, averaging out over k): checked by NMSE, not elementwise.
    ctx->set_tf32(true);
    cpu::matmul_forward(ref.data(), in.data(), w.data(), n, k, m);
    ok(gpu::matmul_forward(*ctx, d_out.data(), d_in.data(), d_w.data(), n, k, m));
    const auto got = down(*ctx, d_out);
    const double e = nmse(got.data(), ref.data(), ref.size());
    INFO("TF32 matmul NMSE " << e);
    CHECK(e < 1e-5);
    ctx->set_tf32(false);
  }
}

TEST_CASE("cuda bias, residual, GELU and ReLU match the reference", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  const std::size_t n = 300, m = 70;
  const auto x = randn(n * m, 11, 2.0), b = randn(m, 12), dy = randn(n * m, 13), base = randn(n * m, 14);
  auto d_x = up(*ctx, x), d_b = up(*ctx, b), d_dy = up(*ctx, dy);

  {  // bias forward: one addition per element, the same in both.
    auto ref = base;
    cpu::bias_forward(ref.data(), b.data(), n, m);
    auto g = up(*ctx, base);
    ok(gpu::bias_forward(*ctx, g.data(), d_b.data(), n, m));
    require_equal("bias_forward", down(*ctx, g), ref);
  }
  {  // bias backward: a 300-row column sum in another order (chunks, then 8 lanes).
    const auto db0 = randn(m, 15);
    auto ref = db0;
    cpu::bias_backward(ref.data(), dy.data(), n, m);
    auto g = up(*ctx, db0);
    ok(gpu::bias_backward(*ctx, g.data(), d_dy.data(), n, m));
    require_close("bias_backward", down(*ctx, g), ref, 1e-4, 1e-5);
  }
  {
    std::vector<float> ref(n * m);
    for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = base[i] + x[i];
    auto g_base = up(*ctx, base);
    gpu::DeviceBuffer<float> g;
    ok(g.allocate(n * m));
    ok(gpu::residual_forward(*ctx, g.data(), g_base.data(), d_x.data(), n * m));
    require_equal("residual_forward", down(*ctx, g), ref);
  }
  // GELU: tanhf on the device and libm's tanhf may differ in the last 1-2
  // ulps; everything around it rounds the same (no FMA on either side). In
  // the backward pass that ulp of tanh is multiplied by x·u' (up to ~30 for
  // |x| near 4 before tanh saturates to ±1), hence its looser atol.
  {
    std::vector<float> ref(n * m);
    cpu::gelu_forward(ref.data(), x.data(), n * m);
    gpu::DeviceBuffer<float> g;
    ok(g.allocate(n * m));
    ok(gpu::gelu_forward(*ctx, g.data(), d_x.data(), n * m));
    require_close("gelu_forward", down(*ctx, g), ref, 2e-6, 1e-5);
  }
  {
    auto ref = base;
    cpu::gelu_backward(ref.data(), dy.data(), x.data(), n * m);
    auto g = up(*ctx, base);
    ok(gpu::gelu_backward(*ctx, g.data(), d_dy.data(), d_x.data(), n * m));
    require_close("gelu_backward", down(*ctx, g), ref, 1e-5, 1e-5);
  }
  {  // ReLU is exact.
    std::vector<float> ref(n * m);
    cpu::relu_forward(ref.data(), x.data(), n * m);
    gpu::DeviceBuffer<float> g;
    ok(g.allocate(n * m));
    ok(gpu::relu_forward(*ctx, g.data(), d_x.data(), n * m));
    require_equal("relu_forward", down(*ctx, g), ref);
    auto ref_b = base;
    cpu::relu_backward(ref_b.data(), dy.data(), x.data(), n * m);
    auto gb = up(*ctx, base);
    ok(gpu::relu_backward(*ctx, gb.data(), d_dy.data(), d_x.data(), n * m));
    require_equal("relu_backward", down(*ctx, gb), ref_b);
  }
}

TEST_CASE("cuda layernorm matches the reference", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  for (std::size_t c : {std::size_t{48}, std::size_t{200}, std::size_t{768}}) {  // below, between and at 32-multiples
    const std::size_t n = 45;
    const auto x = randn(n * c, 21, 3.0), w = randn(c, 22), b = randn(c, 23), dy = randn(n * c, 24);
    const auto dx0 = randn(n * c, 25), dw0 = randn(c, 26), db0 = randn(c, 27);
    std::vector<float> out(n * c), mean(n), rstd(n);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, c);
    auto g_x = up(*ctx, x), g_w = up(*ctx, w), g_b = up(*ctx, b), g_dy = up(*ctx, dy);
    gpu::DeviceBuffer<float> g_out, g_mean, g_rstd;
    ok(g_out.allocate(n * c));
    ok(g_mean.allocate(n));
    ok(g_rstd.allocate(n));
    ok(gpu::layernorm_forward(*ctx, g_out.data(), g_mean.data(), g_rstd.data(), g_x.data(), g_w.data(), g_b.data(), n,
                              c));
    INFO("c = " << c);
    // Row sums of c values in warp order vs. sequential: ~√c·ε relative,
    // c·ε at worst (5e-5 for c = 768); out = x̂·w + b carries rstd's error
    // times |x̂·w| (up to ~10 here) even where b cancels it to near 0.
    require_close("layernorm mean", down(*ctx, g_mean), mean, 1e-5, 1e-4);
    require_close("layernorm rstd", down(*ctx, g_rstd), rstd, 1e-6, 1e-4);
    require_close("layernorm out", down(*ctx, g_out), out, 1e-4, 1e-4);

    auto dx = dx0, dw = dw0, db = db0;
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                            n, c);
    // The backward pass reads the reference's saved mean/rstd, so only its own rounding is compared.
    auto g_mean_ref = up(*ctx, mean), g_rstd_ref = up(*ctx, rstd);
    auto g_dx = up(*ctx, dx0), g_dw = up(*ctx, dw0), g_db = up(*ctx, db0);
    ok(gpu::layernorm_backward(*ctx, g_dx.data(), g_dw.data(), g_db.data(), g_dy.data(), g_x.data(), g_w.data(),
                               g_mean_ref.data(), g_rstd_ref.data(), n, c));
    require_close("layernorm d_in", down(*ctx, g_dx), dx, 1e-4, 1e-4);
    require_close("layernorm d_w", down(*ctx, g_dw), dw, 1e-4, 1e-4);
    require_close("layernorm d_b", down(*ctx, g_db), db, 1e-4, 1e-4);
  }
}

TEST_CASE("cuda causal attention matches the reference", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  struct Case {
    std::size_t batch, t, c, heads;
  };
  // T = 17: rows shorter and longer than a warp; T = 70: several warp passes per row.
  for (const Case k : {Case{2, 17, 24, 3}, Case{3, 70, 64, 4}}) {
    INFO("batch " << k.batch << ", t " << k.t << ", c " << k.c << ", heads " << k.heads);
    const std::size_t n = k.batch * k.t;
    const auto qkv = randn(n * 3 * k.c, 31), dy = randn(n * k.c, 32), dqkv0 = randn(n * 3 * k.c, 33);
    std::vector<float> out(n * k.c), att(k.batch * k.heads * k.t * k.t), scratch(k.t * k.t);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), k.batch, k.t, k.c, k.heads);
    auto g_qkv = up(*ctx, qkv), g_dy = up(*ctx, dy);
    gpu::DeviceBuffer<float> g_out, g_att;
    ok(g_out.allocate(out.size()));
    ok(g_att.allocate(att.size()));
    ok(gpu::attention_forward(*ctx, g_out.data(), g_att.data(), g_qkv.data(), k.batch, k.t, k.c, k.heads));
    // Probabilities in [0, 1] from expf and a warp-order sum: ~1e-7 absolute.
    // The masked upper triangle must be exactly 0 on both sides (atol is
    // 1e-6 but the reference holds 0 there and the kernel writes 0).
    const auto got_att = down(*ctx, g_att);
    require_close("attention att", got_att, att, 1e-6, 1e-5);
    for (std::size_t r = 0; r < k.batch * k.heads * k.t; ++r)
      for (std::size_t j = r % k.t + 1; j < k.t; ++j) REQUIRE(got_att[r * k.t + j] == 0.0f);
    require_close("attention out", down(*ctx, g_out), out, 1e-5, 1e-4);

    auto dqkv = dqkv0;
    cpu::attention_backward(dqkv.data(), scratch.data(), dy.data(), qkv.data(), att.data(), k.batch, k.t, k.c,
                            k.heads);
    auto g_att_ref = up(*ctx, att);
    auto g_dqkv = up(*ctx, dqkv0);
    ok(gpu::attention_backward(*ctx, g_dqkv.data(), g_dy.data(), g_qkv.data(), g_att_ref.data(), k.batch, k.t, k.c,
                               k.heads));
    // Four products (length ≤ t) around the softmax backward's row dot product.
    require_close("attention d_qkv", down(*ctx, g_dqkv), dqkv, 5e-5, 1e-3);
  }
}

TEST_CASE("cuda embedding matches the reference bit for bit", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  const std::size_t vocab = 40, batch = 5, t = 33, c = 150;
  // Few distinct tokens in many positions: many repeats per d_wte row.
  const auto tokens = randint(batch * t, 41, 7);
  const auto wte = randn(vocab * c, 42), wpe = randn(t * c, 43), dy = randn(batch * t * c, 44);
  const auto dwte0 = randn(vocab * c, 45), dwpe0 = randn(t * c, 46);
  std::vector<float> out(batch * t * c);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), batch, t, c);
  auto g_tokens = up(*ctx, tokens);
  auto g_wte = up(*ctx, wte), g_wpe = up(*ctx, wpe), g_dy = up(*ctx, dy);
  gpu::DeviceBuffer<float> g_out;
  ok(g_out.allocate(out.size()));
  ok(gpu::embedding_forward(*ctx, g_out.data(), g_tokens.data(), g_wte.data(), g_wpe.data(), batch, t, c));
  require_equal("embedding_forward", down(*ctx, g_out), out);

  // Index: positions of each token, in order.
  const gpu::TokenIndex index = gpu::build_token_index(tokens, vocab);
  REQUIRE(index.offsets.size() == vocab + 1);
  REQUIRE(index.offsets.back() == static_cast<std::int32_t>(tokens.size()));
  for (std::size_t v = 0; v < vocab; ++v)
    for (std::int32_t p = index.offsets[v]; p < index.offsets[v + 1]; ++p) {
      REQUIRE(tokens[static_cast<std::size_t>(index.positions[static_cast<std::size_t>(p)])] ==
              static_cast<std::int32_t>(v));
      if (p > index.offsets[v]) REQUIRE(index.positions[static_cast<std::size_t>(p - 1)] < index.positions[static_cast<std::size_t>(p)]);
    }

  auto dwte = dwte0, dwpe = dwpe0;
  cpu::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tokens.data(), batch, t, c);
  auto g_offsets = up(*ctx, index.offsets), g_positions = up(*ctx, index.positions);
  auto g_dwte = up(*ctx, dwte0), g_dwpe = up(*ctx, dwpe0);
  ok(gpu::embedding_backward(*ctx, g_dwte.data(), g_dwpe.data(), g_dy.data(), g_offsets.data(), g_positions.data(),
                             vocab, batch, t, c));
  // Same additions in the same (b, i) order: the same bits.
  require_equal("embedding d_wte", down(*ctx, g_dwte), dwte);
  require_equal("embedding d_wpe", down(*ctx, g_dwpe), dwpe);
}

TEST_CASE("cuda softmax cross-entropy matches the reference", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  for (std::size_t v : {std::size_t{10}, std::size_t{256}, std::size_t{1000}}) {
    INFO("v = " << v);
    const std::size_t n = 77;
    auto logits = randn(n * v, 51, 3.0);
    const auto targets = randint(n, 52, v);
    logits[5 * v + 3] = logits[5 * v + 1] = 100.0f;  // a tie for the argmax: the first index wins on both sides
    std::vector<float> probs(n * v);
    const double loss = cpu::cross_entropy_forward(probs.data(), logits.data(), targets.data(), n, v);
    auto g_logits = up(*ctx, logits);
    auto g_targets = up(*ctx, targets);
    gpu::DeviceBuffer<float> g_probs;
    gpu::DeviceBuffer<double> g_loss;
    ok(g_probs.allocate(n * v));
    ok(g_loss.allocate(1));
    ok(gpu::cross_entropy_forward(*ctx, g_probs.data(), g_loss.data(), g_logits.data(), g_targets.data(), n, v));
    require_close("cross_entropy probs", down(*ctx, g_probs), probs, 1e-7, 1e-5);
    // Per-row losses in double from fp32 sums: a few fp32 ulps of each row's sum.
    CHECK(down(*ctx, g_loss)[0] == Approx(loss).epsilon(1e-6));

    const auto d0 = randn(n * v, 53, 0.01);
    auto d = d0;
    cpu::cross_entropy_backward(d.data(), probs.data(), targets.data(), n, v, 0.5f);
    auto g_probs_ref = up(*ctx, probs);
    auto g_d = up(*ctx, d0);
    ok(gpu::cross_entropy_backward(*ctx, g_d.data(), g_probs_ref.data(), g_targets.data(), n, v, 0.5f));
    require_equal("cross_entropy_backward", down(*ctx, g_d), d);  // elementwise, same order, no FMA

    gpu::DeviceBuffer<unsigned long long> g_correct;
    ok(g_correct.allocate(1));
    ok(g_correct.zero(ctx->stream()));
    ok(gpu::count_correct(*ctx, g_correct.data(), g_logits.data(), g_targets.data(), n, v));
    CHECK(down(*ctx, g_correct)[0] == cpu::count_correct(logits.data(), targets.data(), n, v));
  }
}

TEST_CASE("cuda AdamW is the reference's update bit for bit", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  const std::size_t n = 1000;
  const std::vector<std::pair<std::size_t, std::size_t>> decay = {{0, 300}, {600, 1000}};
  cpu::AdamWOptions options;
  cpu::AdamW ref(n, options, decay);
  auto made = gpu::AdamW::create(*ctx, n, options, decay);
  INFO(made.status().to_string());
  REQUIRE(made.ok());
  gpu::AdamW& opt = **made;
  auto params = randn(n, 61);
  auto g_params = up(*ctx, params);
  for (int step = 0; step < 4; ++step) {
    const auto grads = randn(n, 62 + static_cast<std::uint64_t>(step), step == 2 ? 1e-6 : 1.0);  // tiny gradients too
    const double lr = 1e-3 * (step + 1);
    ok(ref.step(params, grads, lr));
    auto g_grads = up(*ctx, grads);
    ok(opt.step(*ctx, g_params.data(), g_grads.data(), lr));
    // Same float operations in the same order, no FMA, IEEE division and
    // sqrt: nothing is left to round differently.
    require_equal(cat("adamw params after step ", step + 1), down(*ctx, g_params), params);
  }
  std::vector<float> m(n), v(n);
  ok(opt.download_moments(*ctx, m, v));
  require_equal("adamw m", m, std::vector<float>(ref.first_moment().begin(), ref.first_moment().end()));
  require_equal("adamw v", v, std::vector<float>(ref.second_moment().begin(), ref.second_moment().end()));
  CHECK(opt.steps() == ref.steps());
}

namespace {

/// Runs `steps` AdamW steps of the CPU model and of its device runner from
/// the same parameters on the same batches, comparing the loss and every
/// gradient tensor at the first step, evaluation, and the parameters after.
void compare_model(gpu::Context& ctx, Model& cpu_model, const std::vector<Batch>& batches, double grad_nmse) {
  auto runner = gpu::make_device_model(ctx, cpu_model);
  INFO(runner.status().to_string());
  REQUIRE(runner.ok());
  gpu::DeviceModel& dev = **runner;
  const ParamLayout& layout = cpu_model.layout();
  REQUIRE(dev.layout().total() == layout.total());

  std::vector<float> params(layout.total()), grads(layout.total());
  cpu_model.init(params, 7);
  // Noise on every parameter, so gains differ from 1 and biases from 0 and
  // every term of the backward passes matters.
  const auto jitter = randn(params.size(), 8, 0.02);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += jitter[i];
  const std::vector<float> start = params;
  auto g_params = up(ctx, params);
  gpu::DeviceBuffer<float> g_grads;
  ok(g_grads.allocate(layout.total()));
  // Garbage in the gradient buffer: forward_backward must overwrite it.
  ok(g_grads.assign(std::vector<float>(layout.total(), 7.0f), ctx.stream()));

  cpu::AdamWOptions options;
  cpu::AdamW cpu_opt(layout.total(), options, cpu_model.decay_ranges());
  auto made = gpu::AdamW::create(ctx, layout.total(), options, cpu_model.decay_ranges());
  REQUIRE(made.ok());
  gpu::AdamW& gpu_opt = **made;
  const double lr = 1e-3;

  for (std::size_t step = 0; step < batches.size(); ++step) {
    INFO(cpu_model.name() << " step " << step);
    auto cpu_loss = cpu_model.forward_backward(params, batches[step], grads);
    REQUIRE(cpu_loss.ok());
    ok(dev.upload(batches[step]));
    auto gpu_loss = dev.forward_backward(g_params.data(), g_grads.data());
    INFO(gpu_loss.status().to_string());
    REQUIRE(gpu_loss.ok());
    // The loss after a whole network of reassociated fp32 sums.
    CHECK(*gpu_loss == Approx(*cpu_loss).epsilon(1e-5));
    if (step == 0) {
      const auto g = down(ctx, g_grads);
      for (const TensorSpec& t : layout.tensors()) {
        const double e = nmse(g.data() + t.offset, grads.data() + t.offset, t.size());
        INFO("gradient of " << t.name << ": NMSE " << e << " (bound " << grad_nmse << ")");
        CHECK(e <= grad_nmse);
      }
      auto cpu_eval = cpu_model.evaluate(params, batches[step]);
      auto gpu_eval = dev.evaluate(g_params.data());
      REQUIRE(cpu_eval.ok());
      REQUIRE(gpu_eval.ok());
      CHECK(gpu_eval->loss == Approx(cpu_eval->loss).epsilon(1e-5));
      CHECK(gpu_eval->predictions == cpu_eval->predictions);
      // Argmax can flip only where two logits are within rounding of each other.
      CHECK(std::abs(static_cast<double>(gpu_eval->correct) - static_cast<double>(cpu_eval->correct)) <=
            1.0 + 0.01 * static_cast<double>(cpu_eval->predictions));
    }
    ok(cpu_opt.step(params, grads, lr));
    ok(gpu_opt.step(ctx, g_params.data(), g_grads.data(), lr));
  }
  // AdamW's first steps move each parameter by about ±lr whatever the
  // gradient's size, so a gradient that is 0 up to rounding moves the two
  // sides by ±lr with unrelated signs. gpt has such parameters by
  // construction: the key third of each qkv bias (adding a constant to every
  // key shifts a softmax row uniformly, so its exact gradient is 0), about
  // 0.1% of the test model, which alone can reach NMSE ~5e-3. The per-step
  // losses above are the tight check of the trajectory (those parameters do
  // not change the loss); this bound catches an update that is wrong.
  const auto got = down(ctx, g_params);
  std::vector<float> du_gpu(params.size()), du_cpu(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) du_gpu[i] = got[i] - start[i], du_cpu[i] = params[i] - start[i];
  const double e = nmse(du_gpu.data(), du_cpu.data(), params.size());
  INFO(cpu_model.name() << ": NMSE of the parameter updates after " << batches.size() << " steps: " << e);
  CHECK(e <= 2e-2);
}

}  // namespace

TEST_CASE("cuda mlp runner: loss, gradients and AdamW steps match the CPU model", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  cpu::set_blas_threads(1);
  MlpOptions o;
  o.inputs = 100;
  o.hidden = {64, 33};
  o.classes = 10;
  auto model = Mlp::create(o);
  REQUIRE(model.ok());
  std::vector<Batch> batches;
  for (std::uint64_t s = 0; s < 4; ++s) {
    Batch b;
    b.samples = 24;
    b.features = randn(b.samples * o.inputs, 100 + s);
    b.targets = randint(b.samples, 200 + s, o.classes);
    batches.push_back(std::move(b));
  }
  // Four products of length ≤ 100: per-tensor NMSE ~1e-12 expected.
  compare_model(*ctx, **model, batches, 1e-8);
}

TEST_CASE("cuda gpt runner: loss, gradients and AdamW steps match the CPU model", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  cpu::set_blas_threads(1);
  GptOptions o;
  o.vocab = 256;
  o.context = 24;
  o.width = 48;
  o.layers = 2;
  o.heads = 3;
  auto model = Gpt::create(o);
  REQUIRE(model.ok());
  std::vector<Batch> batches;
  for (std::uint64_t s = 0; s < 4; ++s) {
    Batch b;
    b.samples = 3;
    // A small alphabet, so tokens repeat (the embedding's scatter) as in text.
    b.tokens = randint(b.samples * o.context, 300 + s, 20);
    b.targets = randint(b.samples * o.context, 400 + s, 20);
    batches.push_back(std::move(b));
  }
  // Two blocks of attention, layernorm and GELU: NMSE ~1e-11 expected per tensor.
  compare_model(*ctx, **model, batches, 1e-7);

  {  // With TF32 the loss and gradients stay close (10-bit inputs: looser bounds).
    ctx->set_tf32(true);
    auto runner = gpu::make_device_model(*ctx, **model);
    REQUIRE(runner.ok());
    std::vector<float> params((*model)->layout().total()), grads(params.size());
    (*model)->init(params, 9);
    auto cpu_loss = (*model)->forward_backward(params, batches[0], grads);
    REQUIRE(cpu_loss.ok());
    auto g_params = up(*ctx, params);
    gpu::DeviceBuffer<float> g_grads;
    ok(g_grads.allocate(params.size()));
    ok((*runner)->upload(batches[0]));
    auto loss = (*runner)->forward_backward(g_params.data(), g_grads.data());
    REQUIRE(loss.ok());
    CHECK(*loss == Approx(*cpu_loss).epsilon(1e-3));
    const auto g = down(*ctx, g_grads);
    const double e = nmse(g.data(), grads.data(), grads.size());
    INFO("TF32 gradient NMSE " << e);
    CHECK(e <= 1e-4);
    ctx->set_tf32(false);
  }
}

TEST_CASE("CudaModel answers the Model interface with host buffers as the CPU model does", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  cpu::set_blas_threads(1);
  MlpOptions o;
  o.inputs = 50, o.hidden = {40}, o.classes = 10;
  auto reference = Mlp::create(o);
  auto twin = Mlp::create(o);
  REQUIRE(reference.ok());
  REQUIRE(twin.ok());
  auto made = gpu::CudaModel::create(*ctx, std::move(*twin));
  INFO(made.status().to_string());
  REQUIRE(made.ok());
  Model& model = **made;
  CHECK(model.name() == "mlp");
  CHECK(model.layout().total() == (*reference)->layout().total());
  CHECK(model.work_unit_name() == "samples");
  std::vector<float> params(model.layout().total()), grads(params.size(), 7.0f), ref_grads(params.size());
  model.init(params, 3);
  Batch b;
  b.samples = 16;
  b.features = randn(b.samples * o.inputs, 81);
  b.targets = randint(b.samples, 82, o.classes);
  auto loss = model.forward_backward(params, b, grads);
  auto ref_loss = (*reference)->forward_backward(params, b, ref_grads);
  REQUIRE(loss.ok());
  REQUIRE(ref_loss.ok());
  CHECK(*loss == Approx(*ref_loss).epsilon(1e-5));
  const double e = nmse(grads.data(), ref_grads.data(), grads.size());
  INFO("gradient NMSE " << e);
  CHECK(e <= 1e-8);
  auto eval = model.evaluate(params, b);
  REQUIRE(eval.ok());
  CHECK(eval->loss == Approx(*ref_loss).epsilon(1e-5));
  CHECK(eval->predictions == 16);
  // Refusals come before any copy, with the CPU model's codes.
  std::vector<float> short_grads(3);
  CHECK(model.forward_backward(params, b, short_grads).status().code() == Err::invalid_argument);
  b.targets[0] = 10;
  CHECK(model.forward_backward(params, b, grads).status().code() == Err::invalid_argument);
}

TEST_CASE("cuda runners refuse bad batches as the CPU models do", "[cuda]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  GptOptions o;
  o.context = 8, o.width = 16, o.layers = 1, o.heads = 2;
  auto model = Gpt::create(o);
  REQUIRE(model.ok());
  auto runner = gpu::make_device_model(*ctx, **model);
  REQUIRE(runner.ok());
  std::vector<float> none(1);
  auto early = (*runner)->forward_backward(none.data(), none.data());
  REQUIRE_FALSE(early.ok());
  CHECK(early.status().code() == Err::invalid_argument);  // no batch yet: refused before touching the pointers
  Batch b;
  b.samples = 1;
  b.tokens.assign(8, 1);
  b.targets.assign(8, 1);
  b.tokens[3] = 256;
  const Status s = (*runner)->upload(b);
  CHECK(s.code() == Err::invalid_argument);
  CHECK(s.message().find("token 256") != std::string::npos);
  b.tokens.pop_back();
  CHECK((*runner)->upload(b).code() == Err::invalid_argument);
}

TEST_CASE("nccl collective with one rank: identity all-reduce, average, broadcast, barrier, host spans", "[cuda][nccl]") {
  auto ctx = gpu_or_skip();
  if (!ctx) return;
  LaunchInfo launch;  // a single worker, as launch_info_from_env() gives without a launcher
  launch.run_id = "cuda-backend-test";
  auto made = gpu::NcclCollective::create(launch, *ctx);
  INFO(made.status().to_string());
  REQUIRE(made.ok());
  gpu::NcclCollective& c = **made;
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  CHECK(c.backend() == "nccl");
  const auto x = randn(1 << 16, 71);
  auto d = up(*ctx, x);
  ok(c.allreduce_sum(std::span<float>(d.data(), d.size())));
  require_equal("allreduce_sum over one rank", down(*ctx, d), x);
  ok(c.allreduce_average(std::span<float>(d.data(), d.size())));
  require_equal("allreduce_average over one rank", down(*ctx, d), x);
  ok(c.broadcast(std::span<float>(d.data(), d.size()), 0));
  require_equal("broadcast from rank 0", down(*ctx, d), x);
  CHECK(c.broadcast(std::span<float>(d.data(), d.size()), 1).code() == Err::invalid_argument);
  ok(c.barrier());
  // Host spans (the training loop's flags, counters and loss) are staged
  // through a device buffer and come back unchanged from a group of one.
  std::vector<float> host = {1.5f, -2.0f, 3.25f, 1e-30f};
  const std::vector<float> host0 = host;
  ok(c.allreduce_sum(host));
  require_equal("allreduce_sum of a host span over one rank", host, host0);
  ok(c.broadcast(host, 0));
  require_equal("broadcast of a host span from rank 0", host, host0);
  std::vector<float> none;
  ok(c.allreduce_sum(none));  // nothing to exchange, no pointer to ask about
  CHECK(gpu::local_device(LaunchInfo{3, 4, 3, 4, "mpirun", "x"}, 2) == 1);
}
