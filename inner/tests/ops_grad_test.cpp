// Every CPU op's backward pass against central finite differences of its
// forward pass. The scalar checked is L = Σ out·R for a fixed random R, so
// d_out = R and every output element takes part.
#include <catch2/catch.hpp>

#include "inner/cpu/activations.h"
#include "inner/cpu/attention.h"
#include "inner/cpu/bias.h"
#include "inner/cpu/blas.h"
#include "inner/cpu/cross_entropy.h"
#include "inner/cpu/embedding.h"
#include "inner/cpu/layernorm.h"
#include "inner/cpu/matmul.h"
#include "inner/tests/grad_check.h"

using namespace geoloco::inner;
using namespace geoloco::inner::cpu;
using namespace geoloco::inner::testing;

namespace {
constexpr double kH = 1e-2;  // fp32 step: large enough that rounding noise stays ~1e-5
constexpr double kAtol = 2e-3;
constexpr double kRtol = 2e-2;
}  // namespace

TEST_CASE("matmul backward matches finite differences", "[ops]") {
  set_blas_threads(1);
  const std::size_t n = 3, k = 4, m = 5;
  auto in = random_vector(n * k, 1), w = random_vector(k * m, 2), r = random_vector(n * m, 3);
  std::vector<float> out(n * m);
  auto loss = [&] {
    matmul_forward(out.data(), in.data(), w.data(), n, k, m);
    return dot(out, r);
  };
  std::vector<float> d_in(n * k, 0.0f), d_w(k * m, 0.0f);
  matmul_backward(d_in.data(), d_w.data(), r.data(), in.data(), w.data(), n, k, m);
  check_gradient(in, d_in, loss, kH, kAtol, kRtol, "matmul d_in");
  check_gradient(w, d_w, loss, kH, kAtol, kRtol, "matmul d_w");

  SECTION("backward accumulates into existing gradients") {
    std::vector<float> again = d_w;
    std::vector<float> d_in2(n * k, 0.0f);
    matmul_backward(d_in2.data(), again.data(), r.data(), in.data(), w.data(), n, k, m);
    for (std::size_t i = 0; i < again.size(); ++i) CHECK(again[i] == Approx(2.0f * d_w[i]).margin(1e-6));
  }
}

TEST_CASE("matmul with transposed weight (tied head) matches finite differences", "[ops]") {
  const std::size_t n = 3, k = 4, m = 6;
  auto in = random_vector(n * k, 4), w = random_vector(m * k, 5), r = random_vector(n * m, 6);
  std::vector<float> out(n * m);
  auto loss = [&] {
    matmul_nt_forward(out.data(), in.data(), w.data(), n, k, m);
    return dot(out, r);
  };
  loss();
  // out[0][1] = Σ_j in[0][j]·w[1][j]
  double expected = 0.0;
  for (std::size_t j = 0; j < k; ++j) expected += static_cast<double>(in[j]) * w[k + j];
  CHECK(out[1] == Approx(expected).epsilon(1e-5));
  std::vector<float> d_in(n * k, 0.0f), d_w(m * k, 0.0f);
  matmul_nt_backward(d_in.data(), d_w.data(), r.data(), in.data(), w.data(), n, k, m);
  check_gradient(in, d_in, loss, kH, kAtol, kRtol, "matmul_nt d_in");
  check_gradient(w, d_w, loss, kH, kAtol, kRtol, "matmul_nt d_w");
}

TEST_CASE("bias add backward sums the rows", "[ops]") {
  const std::size_t n = 4, m = 3;
  auto x = random_vector(n * m, 7), b = random_vector(m, 8), r = random_vector(n * m, 9);
  std::vector<float> out;
  auto loss = [&] {
    out = x;
    bias_forward(out.data(), b.data(), n, m);
    return dot(out, r);
  };
  loss();
  CHECK(out[m + 2] == Approx(x[m + 2] + b[2]));
  std::vector<float> d_b(m, 0.0f);
  bias_backward(d_b.data(), r.data(), n, m);
  CHECK(d_b[1] == Approx(r[1] + r[m + 1] + r[2 * m + 1] + r[3 * m + 1]));
  check_gradient(b, d_b, loss, kH, kAtol, kRtol, "bias d_b");
}

TEST_CASE("layernorm forward normalizes and backward matches finite differences", "[ops]") {
  const std::size_t n = 3, c = 8;
  auto in = random_vector(n * c, 10, 2.0), w = random_vector(c, 11), b = random_vector(c, 12),
       r = random_vector(n * c, 13);
  for (float& v : in) v += 1.5f;  // a non-zero mean to remove
  std::vector<float> out(n * c), mean(n), rstd(n);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), w.data(), b.data(), n, c);
    return dot(out, r);
  };
  {
    std::vector<float> ones(c, 1.0f), zeros(c, 0.0f);
    layernorm_forward(out.data(), mean.data(), rstd.data(), in.data(), ones.data(), zeros.data(), n, c);
    double s = 0.0, s2 = 0.0;
    for (std::size_t j = 0; j < c; ++j) s += out[j], s2 += static_cast<double>(out[j]) * out[j];
    CHECK(s / c == Approx(0.0).margin(1e-6));
    CHECK(s2 / c == Approx(1.0).epsilon(1e-3));  // unit variance (up to the 1e-5 epsilon)
  }
  loss();
  std::vector<float> d_in(n * c, 0.0f), d_w(c, 0.0f), d_b(c, 0.0f);
  layernorm_backward(d_in.data(), d_w.data(), d_b.data(), r.data(), in.data(), w.data(), mean.data(), rstd.data(), n,
                     c);
  check_gradient(in, d_in, loss, kH, kAtol, kRtol, "layernorm d_in");
  check_gradient(w, d_w, loss, kH, kAtol, kRtol, "layernorm d_w");
  check_gradient(b, d_b, loss, kH, kAtol, kRtol, "layernorm d_b");
}

TEST_CASE("GELU (tanh approximation) values and gradient", "[ops]") {
  std::vector<float> x = {-3.0f, -1.0f, -0.5f, 0.0f, 0.3f, 1.0f, 2.5f};
  std::vector<float> out(x.size());
  gelu_forward(out.data(), x.data(), x.size());
  CHECK(out[3] == 0.0f);
  CHECK(out[5] == Approx(0.8411920).epsilon(1e-6));   // 0.5·(1 + tanh(√(2/π)·1.044715))
  CHECK(out[1] == Approx(-0.1588080).epsilon(1e-5));  // gelu(−x) = gelu(x) − x
  auto r = random_vector(x.size(), 14);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), x.size());
    return dot(out, r);
  };
  std::vector<float> d(x.size(), 0.0f);
  gelu_backward(d.data(), r.data(), x.data(), x.size());
  CHECK(d[3] == Approx(0.5f * r[3]));  // gelu'(0) = 1/2
  check_gradient(x, d, loss, 1e-3, 1e-4, 1e-2, "gelu");
}

TEST_CASE("ReLU values and gradient away from the kink", "[ops]") {
  std::vector<float> x = {-2.0f, -0.5f, 0.25f, 1.5f};
  std::vector<float> out(x.size());
  relu_forward(out.data(), x.data(), x.size());
  CHECK(out == std::vector<float>{0.0f, 0.0f, 0.25f, 1.5f});
  auto r = random_vector(x.size(), 15);
  auto loss = [&] {
    relu_forward(out.data(), x.data(), x.size());
    return dot(out, r);
  };
  std::vector<float> d(x.size(), 0.0f);
  relu_backward(d.data(), r.data(), x.data(), x.size());
  CHECK(d[0] == 0.0f);
  CHECK(d[3] == r[3]);
  check_gradient(x, d, loss, 1e-3, 1e-5, 1e-3, "relu");
}

TEST_CASE("causal attention: mask, probabilities, and gradient", "[ops]") {
  set_blas_threads(1);
  const std::size_t B = 2, T = 4, C = 8, H = 2;
  auto qkv = random_vector(B * T * 3 * C, 16), r = random_vector(B * T * C, 17);
  std::vector<float> out(B * T * C), att(B * H * T * T);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, H);
    return dot(out, r);
  };
  loss();
  for (std::size_t row = 0; row < B * H * T; ++row) {
    const std::size_t i = row % T;
    double sum = 0.0;
    for (std::size_t j = 0; j < T; ++j) {
      if (j > i) CHECK(att[row * T + j] == 0.0f);  // no position sees the future
      sum += att[row * T + j];
    }
    CHECK(sum == Approx(1.0).epsilon(1e-6));
  }
  // Position 0 attends only to itself: its output is its own value vector.
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t d = 0; d < C / H; ++d) CHECK(out[h * (C / H) + d] == Approx(qkv[2 * C + h * (C / H) + d]));
  std::vector<float> d_qkv(qkv.size(), 0.0f), scratch(T * T);
  attention_backward(d_qkv.data(), scratch.data(), r.data(), qkv.data(), att.data(), B, T, C, H);
  check_gradient(qkv, d_qkv, loss, kH, kAtol, kRtol, "attention d_qkv");
}

TEST_CASE("embedding: token plus position, gradients accumulate over repeats", "[ops]") {
  const std::size_t B = 2, T = 3, C = 4, V = 5;
  std::vector<std::int32_t> tokens = {1, 4, 1, 0, 1, 3};
  auto wte = random_vector(V * C, 18), wpe = random_vector(T * C, 19), r = random_vector(B * T * C, 20);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, r);
  };
  loss();
  CHECK(out[(1 * T + 2) * C + 1] == wte[3 * C + 1] + wpe[2 * C + 1]);
  std::vector<float> d_wte(V * C, 0.0f), d_wpe(T * C, 0.0f);
  embedding_backward(d_wte.data(), d_wpe.data(), r.data(), tokens.data(), B, T, C);
  CHECK(d_wte[2 * C] == 0.0f);  // token 2 never occurs
  check_gradient(wte, d_wte, loss, kH, kAtol, kRtol, "embedding d_wte");
  check_gradient(wpe, d_wpe, loss, kH, kAtol, kRtol, "embedding d_wpe");
}

TEST_CASE("softmax cross-entropy: values and gradient", "[ops]") {
  const std::size_t n = 3, v = 5;
  auto logits = random_vector(n * v, 21, 2.0);
  std::vector<std::int32_t> targets = {0, 3, 4};
  std::vector<float> probs(n * v);
  const double loss0 = cross_entropy_forward(probs.data(), logits.data(), targets.data(), n, v);
  double expected = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    double z = 0.0;
    for (std::size_t j = 0; j < v; ++j) z += std::exp(static_cast<double>(logits[i * v + j]));
    expected += std::log(z) - logits[i * v + static_cast<std::size_t>(targets[i])];
  }
  CHECK(loss0 == Approx(expected / n).epsilon(1e-6));
  SECTION("uniform logits give log(vocab)") {
    std::vector<float> zeros(n * v, 0.0f);
    CHECK(cross_entropy_forward(probs.data(), zeros.data(), targets.data(), n, v) == Approx(std::log(5.0)));
  }
  SECTION("gradient") {
    cross_entropy_forward(probs.data(), logits.data(), targets.data(), n, v);
    std::vector<float> d(n * v, 0.0f);
    cross_entropy_backward(d.data(), probs.data(), targets.data(), n, v);
    auto loss = [&] { return cross_entropy_forward(probs.data(), logits.data(), targets.data(), n, v); };
    check_gradient(logits, d, loss, 1e-2, 1e-4, 1e-2, "cross-entropy d_logits");
  }
  SECTION("accuracy counts argmax hits") {
    std::vector<float> z = {0, 5, 1, 0, 0, /**/ 0, 0, 0, 9, 0, /**/ 1, 1, 1, 1, 2};
    CHECK(count_correct(z.data(), targets.data(), n, v) == 2);  // rows 1 and 2
  }
}
