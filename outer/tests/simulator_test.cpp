#include "outer/sim/simulator.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "common/digest.h"
#include "outer/checkpoint.h"

using namespace geoloco;
using namespace geoloco::outer;
using namespace geoloco::outer::sim;

namespace {

// A small least-squares task whose parameters stay well inside [0.5, 1.5]:
// θ_r and θ_s are then within a factor 2 of each other, so Δ = θ_r − θ_s and
// θ_r − Δ are exact in fp32 (Sterbenz) and η = 1 reproduces θ_s exactly.
LeastSquaresOptions positive_task() {
  LeastSquaresOptions t;
  t.features = 32;
  t.tensors = 4;
  t.samples_per_site = 512;
  t.batch = 8;
  t.eval_samples = 256;
  t.target_mean = 1.0;
  t.target_spread = 0.3;
  t.init_value = 1.0;
  t.adamw.learning_rate = 4e-3;
  t.seed = 7;
  return t;
}

SimulationReport run(const SimulationOptions& o) {
  auto r = simulate(o);
  INFO((r.ok() ? std::string() : r.status().to_string()));
  REQUIRE(r.ok());
  return std::move(r).value();
}

}  // namespace

TEST_CASE("simulator: one site, H = 1, outer SGD with eta = 1 equals the inner optimizer alone, bit for bit") {
  SimulationOptions o;
  o.sites = 1;
  o.rounds = 400;
  o.inner_steps = 1;
  o.outer = OuterOptimizerOptions::averaging();
  o.trainer = positive_task();
  const auto report = run(o);

  auto alone = LeastSquaresTrainer::create(o.trainer, 0);
  REQUIRE(alone.ok());
  for (std::uint64_t step = 1; step <= o.rounds; ++step) {
    REQUIRE((*alone)->step().ok());
    // Round by round, not only at the end.
    REQUIRE(report.rounds[step - 1].anchor_digest == digest_f32((*alone)->parameters()));
  }
  const auto params = (*alone)->parameters();
  REQUIRE(report.anchor == std::vector<float>(params.begin(), params.end()));
  CHECK(report.final_loss < report.initial_loss / 10);  // it trained
  CHECK(report.total_bytes_sent == 0);                  // one site has nobody to talk to
}

TEST_CASE("simulator: k sites with identical data and seeds give the anchor of one site") {
  SimulationOptions one;
  one.sites = 1;
  one.rounds = 12;
  one.inner_steps = 10;
  one.trainer = positive_task();
  one.trainer.same_data_on_every_site = true;
  one.trainer.target_mean = 0.0;  // sign changes allowed here: no Sterbenz needed
  one.trainer.init_value = 0.0;
  // A lossy pipeline with error feedback: the same bytes on every site.
  one.compression = compression::PipelineSpec{{compression::TopkSpec{0.25, 16},
                                               compression::QuantizeSpec{8, 16, compression::Rounding::nearest}}};
  one.chunk_elements = 8;  // several chunks, several owners
  const auto single = run(one);
  for (std::uint32_t k : {2u, 3u, 4u, 7u}) {
    SimulationOptions many = one;
    many.sites = k;
    const auto multi = run(many);
    INFO("k = " << k);
    REQUIRE(multi.rounds.size() == single.rounds.size());
    for (std::size_t r = 0; r < single.rounds.size(); ++r) REQUIRE(multi.rounds[r].anchor_digest == single.rounds[r].anchor_digest);
    REQUIRE(multi.anchor == single.anchor);
  }
}

TEST_CASE("simulator: shuffled chunk arrival gives bit-identical anchors") {
  SimulationOptions o;
  o.sites = 4;
  o.rounds = 6;
  o.inner_steps = 8;
  o.trainer = positive_task();
  o.trainer.target_mean = 0.0;
  o.compression = compression::PipelineSpec{{compression::QuantizeSpec{4, 8, compression::Rounding::stochastic}}};
  o.chunk_elements = 5;
  o.streaming.fragments = 2;
  const auto ordered = run(o);
  for (std::uint64_t seed : {11u, 12u, 13u}) {
    SimulationOptions shuffled = o;
    shuffled.arrival_shuffle_seed = seed;  // same stochastic rounding; only the arrival order differs
    const auto s = run(shuffled);
    for (std::size_t r = 0; r < o.rounds; ++r) REQUIRE(s.rounds[r].anchor_digest == ordered.rounds[r].anchor_digest);
  }
}

TEST_CASE("simulator: DiLoCo with 4 sites reaches synchronous data parallelism's loss within 1% with H times fewer bytes") {
  SimulationOptions dp;
  dp.mode = SimulationMode::data_parallel;
  dp.sites = 4;
  dp.inner_steps = 25;  // H
  dp.rounds = 120;
  dp.trainer.features = 64;
  dp.trainer.tensors = 4;
  dp.trainer.samples_per_site = 4096;
  dp.trainer.batch = 16;
  dp.trainer.noise = 0.1;
  dp.trainer.adamw.learning_rate = 1e-2;
  // Decay to zero so both runs settle at their fixed point instead of
  // jittering around it at a constant learning rate.
  dp.trainer.adamw.decay_steps = dp.rounds * dp.inner_steps;
  dp.trainer.seed = 2026;
  SimulationOptions diloco = dp;
  diloco.mode = SimulationMode::diloco;
  // Outer Nesterov with η = 0.7 as DiLoCo, but μ = 0.5: on this convex task
  // the run ends at the noise floor, where μ = 0.9's effective step of
  // η/(1 − μ) = 7 amplifies the sites' minibatch noise (about +2% loss);
  // DiLoCo's μ = 0.9 is tuned for non-convex language models.
  diloco.outer.momentum = 0.5;
  const auto a = run(dp);
  const auto b = run(diloco);
  INFO("data parallel " << a.final_loss << ", DiLoCo " << b.final_loss << ", initial " << a.initial_loss);
  REQUIRE(a.final_loss < a.initial_loss / 1000);  // both really trained, to the noise floor ½·0.1²
  CHECK(a.final_loss == Approx(0.005).epsilon(0.05));
  CHECK(std::abs(b.final_loss - a.final_loss) <= 0.01 * a.final_loss);
  // Raw fp32 both ways: per site, data parallelism exchanges the model's size
  // every step, DiLoCo every H steps.
  CHECK(b.total_bytes_sent * dp.inner_steps == a.total_bytes_sent);
  // 65 values over 4 sites, one chunk owned by site 0: it sends the reduced
  // chunk to 3 others (3 × 260 bytes); the others send their own (260 bytes).
  CHECK(b.rounds[0].bytes_sent == std::vector<std::uint64_t>{780, 260, 260, 260});
  CHECK(b.rounds[0].exchange_seconds == Approx(2 * 0.1 + 780 * 8 / 1e9));
  CHECK(a.rounds[0].exchange_seconds == Approx(dp.inner_steps * (2 * 0.1 + 780 * 8 / 1e9)));
}

TEST_CASE("simulator: streaming DiLoCo syncs every fragment once per round and still converges") {
  SimulationOptions o;
  o.sites = 3;
  o.inner_steps = 20;
  o.rounds = 60;
  o.trainer.features = 64;
  o.trainer.tensors = 4;  // + bias: 5 tensors, 4 fragments
  o.trainer.adamw.learning_rate = 1e-2;
  o.trainer.adamw.decay_steps = o.rounds * o.inner_steps;
  o.outer.momentum = 0.5;
  o.streaming.fragments = 4;
  o.streaming.overlap_steps = 2;
  o.streaming.alpha = 0.5;
  const auto report = run(o);
  for (const auto& r : report.rounds) {
    // Offsets f·H/F = 0, 5, 10, 15: fragment 0 syncs at the round's last step.
    REQUIRE(r.fragments_synced == std::vector<std::uint32_t>{1, 2, 3, 0});
  }
  CHECK(report.final_loss < report.initial_loss / 500);
  // Every value crosses the link once per round, as in plain DiLoCo.
  CHECK(report.rounds[5].raw_bytes == 3u * 65u * 4u);
}

TEST_CASE("simulator: a lossy pipeline with error feedback sends fewer bytes and still converges") {
  SimulationOptions raw;
  raw.sites = 4;
  raw.inner_steps = 20;
  raw.rounds = 60;
  raw.trainer.features = 256;
  raw.trainer.adamw.learning_rate = 1e-2;
  raw.trainer.adamw.decay_steps = raw.rounds * raw.inner_steps;
  raw.outer.momentum = 0.5;
  raw.chunk_elements = 256;
  SimulationOptions lossy = raw;
  lossy.compression = compression::PipelineSpec{{compression::QuantizeSpec{4, 64, compression::Rounding::nearest}}};
  const auto a = run(raw);
  const auto b = run(lossy);
  INFO("raw " << a.final_loss << " (" << a.total_bytes_sent << " B), 4-bit " << b.final_loss << " ("
              << b.total_bytes_sent << " B)");
  CHECK(b.total_bytes_sent * 4 < a.total_bytes_sent);
  CHECK(b.total_exchange_seconds < a.total_exchange_seconds);
  CHECK(b.final_loss < b.initial_loss / 500);
  CHECK(b.final_loss < a.final_loss * 1.05);
}

TEST_CASE("simulator: bad options are refused naming the rule") {
  SimulationOptions o;
  o.sites = 0;
  CHECK_THAT(simulate(o).status().message(), Catch::Contains("sites must be in [1, 1024]"));
  o = SimulationOptions{};
  o.streaming.overlap_steps = o.inner_steps;
  CHECK_THAT(simulate(o).status().message(), Catch::Contains("must be smaller than inner.steps"));
  o = SimulationOptions{};
  o.streaming.fragments = 6;  // 4 weight tensors + bias = 5
  auto r = simulate(o);
  CHECK(r.status().code() == Err::invalid_argument);
  CHECK_THAT(r.status().message(), Catch::Contains("exceeds the number of tensors (5)"));
  o = SimulationOptions{};
  o.outer.learning_rate = 0;
  CHECK_THAT(simulate(o).status().message(), Catch::Contains("outer.lr must be in (0, 10]"));
  o = SimulationOptions{};
  o.trainer.adamw.beta1 = 1.0;
  CHECK_THAT(simulate(o).status().message(), Catch::Contains("inner.beta1 must be in [0, 1)"));
  o = SimulationOptions{};
  o.bandwidth_bits_per_s = 0;
  CHECK_THAT(simulate(o).status().message(), Catch::Contains("bandwidth"));
}

TEST_CASE("simulator: a diverging trainer stops the run with the round and site") {
  SimulationOptions o;
  o.sites = 2;
  o.rounds = 50;
  o.inner_steps = 5;
  o.trainer.adamw.learning_rate = 1e30;  // the replica overflows to Inf
  auto r = simulate(o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Err::non_finite);
  CHECK_THAT(r.status().message(), Catch::Contains("simulation round 1, pseudo-gradient of site 0"));
}

TEST_CASE("simulator: a job file's outer settings fill the options") {
  OuterJobConfig job;
  job.inner.steps = 30;
  job.outer = OuterOptimizerOptions::averaging();
  job.weighting = Weighting::uniform;
  job.streaming.fragments = 2;
  SimulationOptions o;
  REQUIRE(apply_job_config(job, o).ok());
  CHECK(o.inner_steps == 30);
  CHECK(o.outer.learning_rate == 1.0);
  CHECK(o.weighting == Weighting::uniform);
  CHECK(o.streaming.fragments == 2);
  job.streaming.overlap_steps = 30;
  CHECK_THAT(apply_job_config(job, o).message(), Catch::Contains("streaming.overlap (30) must be smaller"));
}

TEST_CASE("simulator: carry loses no straggler's work; drop reports what it discards") {
  SimulationOptions o;
  o.sites = 3;
  o.rounds = 8;
  o.inner_steps = 10;
  o.trainer.features = 16;
  o.outer.momentum = 0.5;
  o.left_out = {{2, 2}, {2, 3}, {1, 6}};  // site 2 misses rounds 2-3, site 1 misses round 6
  o.straggler.decay = 0.5;
  const auto carry = run(o);
  std::vector<std::uint64_t> counted(3, 0);
  for (const auto& r : carry.rounds)
    for (std::uint32_t s = 0; s < 3; ++s) counted[s] += r.steps_counted[s];
  CHECK(counted == std::vector<std::uint64_t>{80, 80, 80});  // every inner step joined some round
  const auto& r4 = carry.rounds[3];
  CHECK(r4.participants == std::vector<std::uint32_t>{0, 1, 2});
  CHECK(r4.steps_counted == std::vector<std::uint64_t>{10, 10, 30});
  // Token weights: 10 steps × 16 samples; site 2's 30 steps are 2 rounds late.
  CHECK(r4.weights == std::vector<double>{160.0, 160.0, 480.0 * 0.25});
  REQUIRE(r4.notes.size() == 1);
  CHECK_THAT(r4.notes[0], Catch::Contains("site 2: 2 round(s) late, policy carry"));
  CHECK(carry.rounds[1].participants == std::vector<std::uint32_t>{0, 1});
  CHECK(carry.rounds[1].bytes_sent[2] == 0);  // a site outside the PLAN sends nothing
  CHECK(carry.final_loss < carry.initial_loss / 50);  // 80 steps: it trains

  o.straggler.policy = StragglerPolicy::drop;
  const auto drop = run(o);
  std::vector<std::uint64_t> dropped(3, 0);
  counted.assign(3, 0);
  for (const auto& r : drop.rounds)
    for (std::uint32_t s = 0; s < 3; ++s) counted[s] += r.steps_counted[s], dropped[s] += r.steps_dropped[s];
  CHECK(dropped == std::vector<std::uint64_t>{0, 20, 30});
  CHECK(counted == std::vector<std::uint64_t>{80, 60, 50});
  CHECK(drop.rounds[3].participants == std::vector<std::uint32_t>{0, 1});
  CHECK_THAT(drop.rounds[3].notes[0], Catch::Contains("discarding 30 inner steps, 480 tokens"));

  o.left_out = {{0, 1}, {1, 1}, {2, 1}};
  CHECK_THAT(simulate(o).status().message(), Catch::Contains("every site is left out"));
}

TEST_CASE("simulator: time-based inner phases run as many steps as fit and weigh sites by tokens") {
  SimulationOptions o;
  o.sites = 2;
  o.rounds = 30;
  o.inner_steps = 1;  // ignored with a time budget
  o.inner_duration_s = 2.0;
  o.site_seconds_per_step = {0.1, 0.25};  // a fast and a slow site
  o.trainer.features = 16;
  o.trainer.adamw.learning_rate = 1e-2;
  o.outer.momentum = 0.5;
  const auto report = run(o);
  CHECK(report.rounds[0].site_inner_steps == std::vector<std::uint64_t>{20, 8});
  CHECK(report.rounds[0].weights == std::vector<double>{320.0, 128.0});
  CHECK(report.rounds.back().inner_step == 600);
  CHECK(report.final_loss < report.initial_loss / 100);
  o.site_seconds_per_step = {0.1};
  CHECK_THAT(simulate(o).status().message(), Catch::Contains("one per site or none"));
  o.site_seconds_per_step = {0.1, 0.2};
  o.streaming.fragments = 2;
  CHECK_THAT(simulate(o).status().message(), Catch::Contains("streaming.fragments = 1"));
}

TEST_CASE("simulator: checkpoints the outer state it ends with") {
  SimulationOptions o;
  o.sites = 2;
  o.rounds = 5;
  o.inner_steps = 4;
  o.trainer.features = 8;
  o.trainer.tensors = 2;
  o.compression = compression::PipelineSpec{{compression::QuantizeSpec{4, 8, compression::Rounding::nearest}}};
  o.job = "sim-ckpt";
  o.config_hash = "cfg-42";
  o.checkpoint_every_rounds = 2;
  o.checkpoint_path = (std::filesystem::temp_directory_path() / "geoloco-sim-test.safetensors").string();
  const auto report = run(o);
  auto loaded = load_checkpoint(o.checkpoint_path);
  std::filesystem::remove(o.checkpoint_path);
  REQUIRE(loaded.ok());
  CHECK(loaded->state.job == "sim-ckpt");
  CHECK(loaded->state.round == 5);
  CHECK(loaded->config_hash == "cfg-42");
  CHECK(loaded->state.anchor == report.anchor);
  CHECK(loaded->state.layout.size() == 3);  // w.0, w.1, bias
  REQUIRE(loaded->state.residuals.size() == 2);  // error feedback is on for a lossy pipeline
  CHECK(loaded->state.residuals[1].site == "site-1");
  double norm = 0;
  for (float v : loaded->state.residuals[0].values) norm += double(v) * v;
  CHECK(norm > 0);  // 4-bit quantization leaves a residual
}
