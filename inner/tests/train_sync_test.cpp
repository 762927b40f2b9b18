// geoloco-train's side of the rounds, in process, on synthetic data so every
// value can be compared exactly.
//   * resume position: a trainer resumed at step 2H takes the step an
//     uninterrupted trainer takes at 2H+1 (same lr, same batch, same bits);
//   * AdamW restored from saved moments continues with the same bits.
#include <catch2/catch.hpp>

#include <cstring>

#include "inner/cpu/blas.h"
#include "inner/tests/synthetic_data.h"
#include "inner/train/run_training.h"

using namespace geoloco;
using namespace geoloco::inner;

namespace {

constexpr std::uint64_t kH = 10;

TrainOptions mlp_options() {
  TrainOptions o;
  o.model = "mlp";
  o.mlp = MlpOptions{16, {32, 16}, 10};
  o.batch = 32;  // 2H steps read 640 items of 512: the resume crosses an epoch
  o.steps = 100;
  // The warmup (30 steps) outlasts two rounds: a restart must not redo it.
  o.schedule = ScheduleOptions{1e-2, 30, 100, 0.1};
  o.seed = 7;
  o.eval_batch = 64;
  return o;
}

TrainOptions gpt_options() {
  TrainOptions o;
  o.model = "gpt";
  o.gpt = GptOptions{256, 8, 16, 1, 2};
  o.batch = 4;
  o.steps = 100;
  o.schedule = ScheduleOptions{3e-3, 30, 100, 0.1};
  o.seed = 5;
  return o;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

}  // namespace

TEST_CASE("a trainer resumed at step 2H takes the step an uninterrupted one takes at 2H+1", "[train][resume]") {
  cpu::set_blas_threads(1);
  for (const TrainOptions& o : {mlp_options(), gpt_options()}) {
    INFO("model " << o.model);
    auto data = o.model == "mlp" ? testing::synthetic_image_dataset() : testing::synthetic_text_dataset(o.gpt.context);
    SingleCollective one;
    auto uninterrupted = Trainer::create(o, one, data);
    REQUIRE(uninterrupted.ok());
    for (std::uint64_t i = 0; i < 2 * kH; ++i) REQUIRE((*uninterrupted)->step().ok());

    // Both later trainers start from the uninterrupted one's parameters; only the resumed one knows where it is.
    auto resumed = Trainer::create(o, one, data);
    auto naive = Trainer::create(o, one, data);
    REQUIRE(resumed.ok());
    REQUIRE(naive.ok());
    REQUIRE((*resumed)->resume_at(2 * kH).ok());
    CHECK((*resumed)->steps_done() == 2 * kH);
    CHECK((*resumed)->optimizer().steps() == 0);  // the moments are not the resume's business
    for (auto* t : {resumed->get(), naive->get()})
      std::copy((*uninterrupted)->params().begin(), (*uninterrupted)->params().end(), t->params().begin());

    auto a = (*uninterrupted)->step();
    auto b = (*resumed)->step();
    auto c = (*naive)->step();
    REQUIRE((a.ok() && b.ok() && c.ok()));
    CHECK(b->step == 2 * kH);
    CHECK(b->step == a->step);
    CHECK(b->lr == a->lr);  // exactly: the schedule is a function of the step
    CHECK(a->lr == learning_rate(o.schedule, 2 * kH));
    CHECK(b->loss == a->loss);  // same parameters, same batch
    CHECK(same_bits((*resumed)->grads(), (*uninterrupted)->grads()));
    // The control: a trainer that does not resume redoes the warmup and reads the first batch again.
    CHECK(c->lr != a->lr);
    CHECK(c->lr == learning_rate(o.schedule, 0));
    CHECK_FALSE(same_bits((*naive)->grads(), (*uninterrupted)->grads()));
    // And one more step still agrees (the streams stay in step).
    REQUIRE((*uninterrupted)->step().ok());
    REQUIRE((*resumed)->step().ok());
    auto a2 = (*uninterrupted)->step();
    auto b2 = (*resumed)->step();
    REQUIRE((a2.ok() && b2.ok()));
    CHECK(b2->lr == a2->lr);

    CHECK((*resumed)->resume_at(5).message().find("cannot resume at step 5") != std::string::npos);
  }
}

TEST_CASE("AdamW restored from a saved state continues with the same bits", "[train][state]") {
  const std::vector<float> g1{0.5f, -0.25f, 1.0f}, g2{-0.125f, 0.75f, 0.25f};
  cpu::AdamWOptions opts;
  cpu::AdamW straight(3, opts, {{0, 2}});
  std::vector<float> p{1.0f, 2.0f, 3.0f};
  for (int i = 0; i < 5; ++i) REQUIRE(straight.step(p, g1, 1e-2).ok());
  std::vector<float> q = p;
  cpu::AdamW restored(3, opts, {{0, 2}});
  REQUIRE(restored.restore(straight.first_moment(), straight.second_moment(), straight.steps()).ok());
  CHECK(restored.steps() == 5);
  REQUIRE(straight.step(p, g2, 1e-2).ok());
  REQUIRE(restored.step(q, g2, 1e-2).ok());
  CHECK(same_bits(p, q));
  // Zero moments (a trainer without a state) take another step.
  cpu::AdamW fresh(3, opts, {{0, 2}});
  std::vector<float> r = q;
  REQUIRE(straight.step(q, g1, 1e-2).ok());
  REQUIRE(fresh.step(r, g1, 1e-2).ok());
  CHECK_FALSE(same_bits(q, r));
  CHECK(restored.restore(std::vector<float>(2), std::vector<float>(3), 1).code() == Err::invalid_argument);
}
