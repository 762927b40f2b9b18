#include "outer/sim/least_squares_trainer.h"

#include <cmath>

namespace geoloco::outer::sim {

namespace {

// Seeds of the independent random streams one task uses.
enum Stream : std::uint64_t { kTarget = 1, kEval = 2, kShard = 100, kBatch = 100000 };

void draw_samples(Rng& rng, const std::vector<double>& w, double b, double noise, std::uint32_t count,
                  std::uint32_t features, std::vector<float>& x, std::vector<float>& y) {
  x.resize(static_cast<std::size_t>(count) * features);
  y.resize(count);
  for (std::uint32_t s = 0; s < count; ++s) {
    double dot = b;
    for (std::uint32_t j = 0; j < features; ++j) {
      const float v = static_cast<float>(rng.normal());
      x[static_cast<std::size_t>(s) * features + j] = v;
      dot += static_cast<double>(v) * w[j];
    }
    y[s] = static_cast<float>(dot + noise * rng.normal());
  }
}

}  // namespace

Status LeastSquaresOptions::validate() const {
  GEOLOCO_RETURN_IF(features < 1, Err::invalid_argument, "trainer.features must be at least 1");
  GEOLOCO_RETURN_IF(tensors < 1 || tensors > features, Err::invalid_argument,
                    "trainer.tensors must be in [1, features = ", features, "], got ", tensors);
  GEOLOCO_RETURN_IF(batch < 1, Err::invalid_argument, "trainer.batch must be at least 1");
  GEOLOCO_RETURN_IF(samples_per_site < batch, Err::invalid_argument, "trainer.samples_per_site (", samples_per_site,
                    ") must be at least the batch (", batch, ")");
  GEOLOCO_RETURN_IF(eval_samples < 1, Err::invalid_argument, "trainer.eval_samples must be at least 1");
  GEOLOCO_RETURN_IF(!(noise >= 0.0 && std::isfinite(noise)), Err::invalid_argument,
                    "trainer.noise must be finite and >= 0, got ", noise);
  GEOLOCO_RETURN_IF(!std::isfinite(target_mean) || !std::isfinite(init_value), Err::invalid_argument,
                    "trainer.target_mean and trainer.init_value must be finite");
  GEOLOCO_RETURN_IF(!(target_spread >= 0.0 && std::isfinite(target_spread)), Err::invalid_argument,
                    "trainer.target_spread must be finite and >= 0, got ", target_spread);
  return adamw.validate();
}

Result<std::unique_ptr<LeastSquaresTrainer>> LeastSquaresTrainer::create(const LeastSquaresOptions& options,
                                                                         std::uint32_t site) {
  GEOLOCO_TRY(options.validate());
  return std::unique_ptr<LeastSquaresTrainer>(new LeastSquaresTrainer(options, site));
}

LeastSquaresTrainer::LeastSquaresTrainer(const LeastSquaresOptions& options, std::uint32_t site)
    : options_(options), adamw_(options.features + 1, options.adamw) {
  const std::uint32_t d = options.features;
  // Tensor sizes differ by at most one value: w.k gets d/T (+1 for the first d%T).
  for (std::uint32_t k = 0; k < options.tensors; ++k) {
    const std::uint64_t size = d / options.tensors + (k < d % options.tensors ? 1 : 0);
    layout_.push_back({cat("w.", k), {size}});
  }
  layout_.push_back({"bias", {}});
  params_.assign(d + 1, static_cast<float>(options.init_value));
  grad_.resize(d + 1);

  Rng target(derive_seed(options.seed, kTarget));
  std::vector<double> w(d);
  for (auto& v : w) v = options.target_mean + options.target_spread * (2.0 * target.uniform() - 1.0);
  const double b = options.target_mean + options.target_spread * (2.0 * target.uniform() - 1.0);

  Rng eval(derive_seed(options.seed, kEval));
  draw_samples(eval, w, b, options.noise, options.eval_samples, d, eval_x_, eval_y_);
  const std::uint64_t stream = options.same_data_on_every_site ? 0 : site;
  Rng shard(derive_seed(options.seed, kShard + stream));
  draw_samples(shard, w, b, options.noise, options.samples_per_site, d, shard_x_, shard_y_);
  batch_rng_ = std::make_unique<Rng>(derive_seed(options.seed, kBatch + stream));
}

Result<StepResult> LeastSquaresTrainer::gradient(std::span<float> grad) {
  const std::uint32_t d = options_.features;
  GEOLOCO_RETURN_IF(grad.size() != params_.size(), Err::invalid_argument, "least squares: gradient buffer has ",
                    grad.size(), " values, the model ", params_.size());
  std::vector<double> acc(d + 1, 0.0);
  double loss = 0.0;
  for (std::uint32_t k = 0; k < options_.batch; ++k) {
    const std::size_t s = batch_rng_->below(options_.samples_per_site);
    const float* x = &shard_x_[s * d];
    double pred = params_[d];
    for (std::uint32_t j = 0; j < d; ++j) pred += static_cast<double>(x[j]) * params_[j];
    const double r = pred - shard_y_[s];
    loss += 0.5 * r * r;
    for (std::uint32_t j = 0; j < d; ++j) acc[j] += r * x[j];
    acc[d] += r;
  }
  const double inv = 1.0 / options_.batch;
  for (std::uint32_t j = 0; j <= d; ++j) grad[j] = static_cast<float>(acc[j] * inv);
  return StepResult{loss * inv, options_.batch};
}

Status LeastSquaresTrainer::apply(std::span<const float> grad) { return adamw_.step(params_, grad); }

Result<StepResult> LeastSquaresTrainer::step() {
  auto r = gradient(grad_);
  if (!r.ok()) return r;
  GEOLOCO_TRY(apply(grad_));
  return r;
}

double LeastSquaresTrainer::loss_on(const std::vector<float>& x, const std::vector<float>& y,
                                    std::span<const float> params) const {
  const std::uint32_t d = options_.features;
  double loss = 0.0;
  for (std::size_t s = 0; s < y.size(); ++s) {
    double pred = params[d];
    for (std::uint32_t j = 0; j < d; ++j) pred += static_cast<double>(x[s * d + j]) * params[j];
    const double r = pred - y[s];
    loss += 0.5 * r * r;
  }
  return loss / static_cast<double>(y.size());
}

Result<double> LeastSquaresTrainer::evaluate(std::span<const float> params) {
  GEOLOCO_RETURN_IF(params.size() != params_.size(), Err::invalid_argument, "least squares: evaluating ",
                    params.size(), " parameters on a model of ", params_.size());
  return loss_on(eval_x_, eval_y_, params);
}

TrainerFactory least_squares_factory(LeastSquaresOptions options) {
  return [options](std::uint32_t site, std::uint32_t) -> Result<std::unique_ptr<Trainer>> {
    auto t = LeastSquaresTrainer::create(options, site);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Trainer>(std::move(t).value());
  };
}

}  // namespace geoloco::outer::sim
