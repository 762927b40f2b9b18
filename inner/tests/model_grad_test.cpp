// Whole-model gradients (tiny mlp and gpt) against central finite
// differences of the model's own loss, for EVERY parameter. The parameters
// are the model's initialization plus noise, so layernorm gains differ from
// 1, biases from 0, and every term of the backward pass is exercised.
#include <catch2/catch.hpp>

#include "inner/cpu/blas.h"
#include "inner/models/gpt.h"
#include "inner/models/mlp.h"
#include "inner/tests/grad_check.h"

using namespace geoloco;
using namespace geoloco::inner;
using namespace geoloco::inner::testing;

namespace {

void check_model(Model& model, const Batch& batch, double noise, double h, double atol, double rtol) {
  std::vector<float> params(model.layout().total());
  model.init(params, 42);
  auto jitter = random_vector(params.size(), 43, noise);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] += jitter[i];
  std::vector<float> grads(params.size(), 7.0f);  // garbage: forward_backward must overwrite it
  auto loss0 = model.forward_backward(params, batch, grads);
  REQUIRE(loss0.ok());
  auto loss = [&] {
    auto e = model.evaluate(params, batch);
    REQUIRE(e.ok());
    return e->loss;
  };
  CHECK(loss() == Approx(*loss0).epsilon(1e-12));  // evaluate and train agree on the loss
  for (const TensorDesc& t : model.layout().tensors()) {
    std::vector<float> x(params.begin() + static_cast<std::ptrdiff_t>(t.offset),
                         params.begin() + static_cast<std::ptrdiff_t>(t.offset + t.size()));
    std::vector<float> g(grads.begin() + static_cast<std::ptrdiff_t>(t.offset),
                         grads.begin() + static_cast<std::ptrdiff_t>(t.offset + t.size()));
    // Perturb through a copy of the tensor written back into the flat buffer.
    auto tensor_loss = [&] {
      std::copy(x.begin(), x.end(), params.begin() + static_cast<std::ptrdiff_t>(t.offset));
      return loss();
    };
    check_gradient(x, g, tensor_loss, h, atol, rtol, model.name() + " " + t.name);
    std::copy(x.begin(), x.end(), params.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
}

}  // namespace

TEST_CASE("mlp: gradient of every parameter matches finite differences", "[model]") {
  cpu::set_blas_threads(1);
  auto mlp = Mlp::create(MlpOptions{12, {8, 6}, 5});
  REQUIRE(mlp.ok());
  CHECK((*mlp)->layout().total() == 12 * 8 + 8 + 8 * 6 + 6 + 6 * 5 + 5);
  Batch b;
  b.samples = 4;
  b.features = random_vector(4 * 12, 44);
  b.targets = {0, 4, 2, 2};
  check_model(**mlp, b, 0.1, 1e-3, 1e-4, 2e-2);
}

TEST_CASE("gpt: gradient of every parameter matches finite differences", "[model]") {
  cpu::set_blas_threads(1);
  GptOptions o;
  o.vocab = 11;
  o.context = 5;
  o.width = 8;
  o.layers = 2;
  o.heads = 2;
  auto gpt = Gpt::create(o);
  REQUIRE(gpt.ok());
  CHECK((*gpt)->layout().tensors().front().name == "wte");
  CHECK((*gpt)->layout().find("h1.mlp.proj.w")->shape == std::vector<std::size_t>{32, 8});
  Batch b;
  b.samples = 2;
  b.tokens = {1, 3, 3, 7, 10, 0, 2, 9, 9, 4};
  b.targets = {3, 3, 7, 10, 1, 2, 9, 9, 4, 5};
  check_model(**gpt, b, 0.2, 1e-2, 1e-4, 3e-2);
}

TEST_CASE("models refuse batches of the wrong shape or out-of-range ids", "[model]") {
  auto mlp = Mlp::create(MlpOptions{4, {3}, 2});
  REQUIRE(mlp.ok());
  std::vector<float> p((*mlp)->layout().total()), g(p.size());
  Batch b;
  b.samples = 2;
  b.features.assign(8, 0.5f);
  b.targets = {0, 2};
  auto r = (*mlp)->forward_backward(p, b, g);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("label 2 outside [0, 2)") != std::string::npos);
  b.targets = {0, 1};
  b.features.resize(7);
  CHECK((*mlp)->forward_backward(p, b, g).status().code() == geoloco::Err::invalid_argument);

  GptOptions o;
  o.vocab = 8, o.context = 2, o.width = 4, o.layers = 1, o.heads = 2;
  auto gpt = Gpt::create(o);
  REQUIRE(gpt.ok());
  std::vector<float> gp((*gpt)->layout().total()), gg(gp.size());
  Batch t;
  t.samples = 1;
  t.tokens = {1, 8};
  t.targets = {2, 3};
  auto e = (*gpt)->evaluate(gp, t);
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().find("token 8 outside [0, 8)") != std::string::npos);

  o.heads = 3;
  auto bad = Gpt::create(o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("multiple of heads") != std::string::npos);
}

TEST_CASE("initialization is deterministic from the seed and layouts are contiguous", "[model]") {
  GptOptions o;
  o.vocab = 16, o.context = 4, o.width = 8, o.layers = 2, o.heads = 2;
  auto gpt = Gpt::create(o);
  REQUIRE(gpt.ok());
  REQUIRE((*gpt)->layout().validate().ok());
  std::vector<float> a((*gpt)->layout().total()), b(a.size()), c(a.size());
  (*gpt)->init(a, 5);
  (*gpt)->init(b, 5);
  (*gpt)->init(c, 6);
  CHECK(a == b);
  CHECK(a != c);
  const TensorDesc* ln = (*gpt)->layout().find("h0.ln1.w");
  REQUIRE(ln != nullptr);
  CHECK(a[ln->offset] == 1.0f);
  // GPT-2 sizes: 2 blocks of 12·C² + 13·C, plus embeddings and the final layernorm.
  CHECK((*gpt)->layout().total() == 16 * 8 + 4 * 8 + 2 * (12 * 64 + 13 * 8) + 2 * 8);
}
