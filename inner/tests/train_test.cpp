// End-to-end training on the real data sets (Debian packages
// dataset-fashion-mnist and bible-kjv, both offline). Where a package is
// missing the test says so and is skipped, visibly.
#include <catch2/catch.hpp>

#include <filesystem>

#include "inner/cpu/blas.h"
#include "inner/data/fashion_mnist.h"
#include "inner/data/text.h"
#include "inner/tests/synthetic_data.h"
#include "inner/train/run_training.h"

using namespace geoloco;
using namespace geoloco::inner;

TEST_CASE("mlp reaches 78% accuracy on Fashion-MNIST in 300 steps", "[train]") {
  cpu::set_blas_threads(1);
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    WARN("SKIPPED: " << kFashionMnistDir << " is missing (install dataset-fashion-mnist)");
    return;
  }
  auto data = FashionMnist::load(kFashionMnistDir, 2000);
  REQUIRE(data.ok());
  CHECK((*data)->train_items() == 60000);
  CHECK((*data)->eval_items() == 2000);
  TrainOptions o;
  o.model = "mlp";
  o.batch = 64;
  o.steps = 300;
  o.schedule = ScheduleOptions{1e-3, 20, 300, 0.1};
  SingleCollective one;
  auto t = Trainer::create(o, one, std::shared_ptr<const Dataset>(std::move(*data)));
  REQUIRE(t.ok());
  auto before = (*t)->evaluate();
  REQUIRE(before.ok());
  auto r = run_training(**t);
  REQUIRE(r.ok());
  const double accuracy = static_cast<double>(r->eval.correct) / static_cast<double>(r->eval.predictions);
  INFO("eval loss " << before->loss << " -> " << r->eval.loss << ", accuracy " << accuracy << " in " << r->seconds
                    << " s");
  CHECK(before->loss > 1.5);
  CHECK(r->eval.loss < 0.6);
  CHECK(accuracy > 0.78);
  CHECK(r->work_units == 300 * 64);
}

TEST_CASE("gpt loss goes down on the King James Bible", "[train]") {
  cpu::set_blas_threads(1);
  auto text = run_bible();
  if (!text.ok()) {
    WARN("SKIPPED: " << text.status().message());
    return;
  }
  CHECK(text->size() > 4'000'000);
  CHECK(text->find("In the beginning God created the heaven and the earth.") != std::string::npos);
  TrainOptions o;
  o.model = "gpt";
  o.gpt = GptOptions{256, 32, 32, 2, 2};
  o.batch = 8;
  o.steps = 150;
  o.schedule = ScheduleOptions{3e-3, 10, 150, 0.1};
  o.adamw.weight_decay = 0.0;
  auto data = TextDataset::create(std::move(*text), o.gpt.context, 0.05, 64);
  REQUIRE(data.ok());
  SingleCollective one;
  auto t = Trainer::create(o, one, std::shared_ptr<const Dataset>(std::move(*data)));
  REQUIRE(t.ok());
  auto before = (*t)->evaluate();
  REQUIRE(before.ok());
  CHECK(before->loss == Approx(std::log(256.0)).margin(0.1));  // small init: near-uniform predictions
  auto r = run_training(**t);
  REQUIRE(r.ok());
  INFO("held-out loss " << before->loss << " -> " << r->eval.loss << " nats/byte in " << r->seconds << " s");
  CHECK(r->eval.loss < 3.0);
  CHECK(r->eval.loss < before->loss - 2.0);
  CHECK(r->eval.predictions == 64 * 32);
}

TEST_CASE("trainer refuses bad options and storage of the wrong size", "[train]") {
  TrainOptions o;
  o.model = "mlp";
  o.mlp = MlpOptions{16, {8}, 10};
  SingleCollective one;
  auto data = testing::synthetic_image_dataset();
  std::vector<float> small(10);
  auto t = Trainer::create(o, one, data, small);
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().message().find("parameter storage holds 10 floats") != std::string::npos);

  // Storage the caller owns (the daemon's shared memory) is used in place.
  std::vector<float> storage(16 * 8 + 8 + 8 * 10 + 10, 0.0f);
  auto in_place = Trainer::create(o, one, data, storage);
  REQUIRE(in_place.ok());
  CHECK((*in_place)->params().data() == storage.data());
  CHECK(storage[0] != 0.0f);  // initialized there
  REQUIRE((*in_place)->step().ok());

  o.model = "transformer";
  CHECK(Trainer::create(o, one, data).status().message() == "model must be 'mlp' or 'gpt', got 'transformer'");
  o.model = "mlp";
  o.batch = 0;
  CHECK(Trainer::create(o, one, data).status().code() == Err::invalid_argument);
}
