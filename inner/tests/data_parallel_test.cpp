// Data parallelism over 2 CPU worker PROCESSES (forked, joined through the
// launcher environment and the shared-memory collective) gives the same
// parameters as one worker:
//   * bit for bit, one worker with 2 micro-batches (same samples, same sums);
//   * within fp32 rounding, one worker computing each step on the combined
//     batch of 2·B samples in one forward/backward pass.
// And the sync seam: rank 0's new anchor reaches every worker.
#include <catch2/catch.hpp>

#include "inner/collective/launch.h"
#include "inner/collective/shm_collective.h"
#include "inner/cpu/blas.h"
#include "inner/optim/clip.h"
#include "inner/tests/fork_ranks.h"
#include "inner/tests/synthetic_data.h"
#include "inner/tests/temp_files.h"
#include "inner/train/run_training.h"

using namespace geoloco;
using namespace geoloco::inner;
using namespace geoloco::inner::testing;

namespace {

TrainOptions mlp_options() {
  TrainOptions o;
  o.model = "mlp";
  o.mlp = MlpOptions{16, {32, 16}, 10};
  o.batch = 8;
  o.steps = 6;
  o.schedule = ScheduleOptions{1e-2, 2, 6, 0.1};
  o.clip_norm = 1.0;
  o.seed = 3;
  o.eval_batch = 64;
  return o;
}

TrainOptions gpt_options() {
  TrainOptions o;
  o.model = "gpt";
  o.gpt = GptOptions{256, 8, 16, 1, 2};
  o.batch = 4;
  o.steps = 4;
  o.schedule = ScheduleOptions{3e-3, 1, 4, 0.1};
  o.seed = 5;
  return o;
}

// Two workers train; each writes its final parameters to a file.
std::vector<std::vector<float>> train_two_workers(const TrainOptions& o, std::shared_ptr<const Dataset> data) {
  TempDir dir("geoloco-dp-test");  // made by the parent: the children write into it
  const auto result = [&](int rank) { return cat(dir.path, "/rank", rank, ".bin"); };
  auto codes = fork_ranks(2, [&](int rank) {
    cpu::set_blas_threads(1);
    auto launch = launch_info_from_env();
    if (!launch.ok()) return 1;
    ShmCollectiveOptions copts;
    copts.timeout_ms = 20'000;
    auto c = make_cpu_collective(*launch, copts);
    if (!c.ok()) return 2;
    auto t = Trainer::create(o, **c, data);
    if (!t.ok()) return 3;
    auto r = run_training(**t);
    if (!r.ok()) return 4;
    return write_floats(result(rank), (*t)->params()) ? 0 : 5;
  });
  REQUIRE(codes == std::vector<int>{0, 0});
  std::vector<std::vector<float>> params = {take_floats(result(0)), take_floats(result(1))};
  REQUIRE(!params[0].empty());
  return params;
}

// One worker, each step on the concatenation of the two workers' batches.
std::vector<float> train_combined_batch(const TrainOptions& o, const Dataset& data) {
  auto model = make_model(o);
  REQUIRE(model.ok());
  Model& m = **model;
  std::vector<float> params(m.layout().total()), grads(params.size());
  m.init(params, o.seed);
  cpu::AdamW adam(params.size(), o.adamw, m.decay_ranges());
  auto s0 = Sampler::create(data.train_items(), 0, 2, o.seed, data.epochs());
  auto s1 = Sampler::create(data.train_items(), 1, 2, o.seed, data.epochs());
  REQUIRE(s0.ok());
  REQUIRE(s1.ok());
  std::vector<std::size_t> items, more;
  Batch batch;
  for (std::uint64_t step = 0; step < o.steps; ++step) {
    s0->next(o.batch, items);
    s1->next(o.batch, more);
    items.insert(items.end(), more.begin(), more.end());
    data.train_batch(items, batch);
    REQUIRE(m.forward_backward(params, batch, grads).ok());
    REQUIRE(clip_global_norm(grads, o.clip_norm).ok());
    REQUIRE(adam.step(params, grads, learning_rate(o.schedule, step)).ok());
  }
  return params;
}

void check_equivalence(TrainOptions o, std::shared_ptr<const Dataset> data) {
  cpu::set_blas_threads(1);
  auto workers = train_two_workers(o, data);
  CHECK(workers[0] == workers[1]);  // replicas stay identical

  TrainOptions single = o;
  single.micro_batches = 2;
  SingleCollective one;
  auto t = Trainer::create(single, one, data);
  REQUIRE(t.ok());
  REQUIRE(run_training(**t).ok());
  std::vector<float> accumulated((*t)->params().begin(), (*t)->params().end());
  REQUIRE(accumulated.size() == workers[0].size());
  CHECK(accumulated == workers[0]);  // bit for bit

  std::vector<float> combined = train_combined_batch(o, *data);
  std::size_t off = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < combined.size(); ++i) {
    const double d = std::fabs(static_cast<double>(combined[i]) - workers[0][i]);
    worst = std::max(worst, d);
    if (d > 1e-5 + 1e-4 * std::fabs(combined[i])) ++off;
  }
  INFO("largest difference from the combined-batch run: " << worst);
  CHECK(off == 0);
  // And training moved the parameters (the comparison is not vacuous).
  auto model = make_model(o);
  std::vector<float> init((*model)->layout().total());
  (*model)->init(init, o.seed);
  CHECK(init != workers[0]);
}

}  // namespace

TEST_CASE("2 worker processes = 1 worker with the combined batch (mlp)", "[data-parallel]") {
  check_equivalence(mlp_options(), synthetic_image_dataset());
}

TEST_CASE("2 worker processes = 1 worker with the combined batch (gpt)", "[data-parallel]") {
  TrainOptions o = gpt_options();
  check_equivalence(o, synthetic_text_dataset(o.gpt.context));
}

TEST_CASE("the sync seam: rank 0's anchor reaches every worker; a failed sync stops all", "[data-parallel]") {
  TrainOptions o = mlp_options();
  o.steps = 4;
  auto data = synthetic_image_dataset();
  auto codes = fork_ranks(2, [&](int rank) {
    cpu::set_blas_threads(1);
    auto launch = launch_info_from_env();
    if (!launch.ok()) return 1;
    auto c = make_cpu_collective(*launch);
    if (!c.ok()) return 2;
    auto t = Trainer::create(o, **c, data);
    if (!t.ok()) return 3;
    TrainHooks hooks;
    hooks.sync_every = 2;
    int syncs = 0;
    hooks.on_sync = [&](SyncPoint& p) {
      // Called on rank 0 only, after steps 2 and 4, with the work since the last sync.
      if (rank != 0 || p.step != static_cast<std::uint64_t>(2 * (syncs + 1)) ||
          p.sync_index != static_cast<std::uint64_t>(syncs) || p.work_units != 2 * 2 * o.batch ||
          p.params.size() != p.layout->total() || !(p.mean_loss > 0.0))
        return GEOLOCO_ERROR(Err::internal, "unexpected sync point");
      ++syncs;
      for (float& x : p.params) x = 0.25f * static_cast<float>(syncs);  // the daemon's new anchor
      return Status();
    };
    auto r = run_training(**t, hooks);
    if (!r.ok()) return 4;
    if (rank == 0 && syncs != 2) return 5;
    for (float x : (*t)->params())
      if (x != 0.5f) return 6;  // the second anchor, on rank 1 too

    // Now rank 0's sync fails: both ranks stop with an error.
    auto t2 = Trainer::create(o, **c, data);
    if (!t2.ok()) return 7;
    hooks.on_sync = [](SyncPoint&) { return GEOLOCO_ERROR(Err::io, "daemon went away"); };
    auto failed = run_training(**t2, hooks);
    if (failed.ok()) return 8;
    const std::string expected = rank == 0 ? "daemon went away" : "the sync on rank 0 failed at step 2";
    return failed.status().message().find(expected) != std::string::npos ? 0 : 9;
  });
  CHECK(codes == std::vector<int>{0, 0});
}
