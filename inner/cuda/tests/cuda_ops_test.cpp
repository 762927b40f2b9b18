// The CUDA backend's ops against the CPU reference, forward and backward.
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
// a pass. The runners' cases are in cuda_runners_test.cpp, the
// device trainer's in device_trainer_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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
#include "inner/cuda/cross_entropy.cuh"
#include "inner/cuda/device.h"
#include "inner/cuda/embedding.cuh"
#include "inner/cuda/layernorm.cuh"
#include "inner/cuda/matmul.h"
#include "inner/cuda/residual.cuh"
#include "inner/cuda/tests/gpu_test.h"

using namespace geoloco;
using namespace geoloco::inner;
namespace gpu = geoloco::inner::cuda;
using gpu::testing::down;
using gpu::testing::gpu_or_skip;
using gpu::testing::nmse;
using gpu::testing::ok;
using gpu::testing::randint;
using gpu::testing::randn;
using gpu::testing::require_close;
using gpu::testing::require_equal;
using gpu::testing::up;

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
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), n,
                            c);
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
    cpu::attention_backward(dqkv.data(), scratch.data(), dy.data(), qkv.data(), att.data(), k.batch, k.t, k.c, k.heads);
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
      if (p > index.offsets[v])
        REQUIRE(index.positions[static_cast<std::size_t>(p - 1)] < index.positions[static_cast<std::size_t>(p)]);
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
