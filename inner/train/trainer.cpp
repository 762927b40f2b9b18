#include "inner/train/trainer.h"

#include <algorithm>

#include "inner/optim/clip.h"

namespace geoloco::inner {

Result<std::unique_ptr<Trainer>> Trainer::create(const TrainOptions& options, Collective& collective,
                                                 std::shared_ptr<const Dataset> dataset, std::span<float> param_storage,
                                                 bool initialize) {
  GEOLOCO_RETURN_IF(dataset == nullptr, Err::invalid_argument, "trainer: no dataset");
  auto model = make_model(options);
  if (!model.ok()) return model.status();
  GEOLOCO_TRY((*model)->layout().validate());
  std::unique_ptr<Trainer> t(new Trainer(options, collective, std::move(dataset), std::move(*model)));
  const std::size_t total = t->model_->layout().total();
  if (param_storage.empty()) {
    // Without `initialize` too: a worker other than rank 0 of a trainer the
    // daemon welcomes with an anchor gets rank 0's parameters by broadcast.
    t->owned_params_.assign(total, 0.0f);
    t->params_ = t->owned_params_;
  } else {
    GEOLOCO_RETURN_IF(param_storage.size() != total, Err::invalid_argument, "trainer: parameter storage holds ",
                      param_storage.size(), " floats, the ", options.model, " layout needs ", total);
    t->params_ = param_storage;
  }
  t->grads_.assign(total, 0.0f);
  if (options.micro_batches > 1) t->micro_grads_.assign(total, 0.0f);
  t->adamw_ = std::make_unique<cpu::AdamW>(total, options.adamw, t->model_->decay_ranges());

  auto samplers = make_worker_samplers(options, *t->dataset_, collective);
  if (!samplers.ok()) return samplers.status();
  t->samplers_ = std::move(*samplers);
  if (initialize) {
    if (collective.rank() == 0) t->model_->init(t->params_, options.seed);
    // Every rank could initialize from the seed itself; broadcasting makes
    // identical replicas a property of the code path, not of the arithmetic.
    GEOLOCO_TRY(collective.broadcast(t->params_, 0));
  }
  return t;
}

Result<std::vector<Sampler>> make_worker_samplers(const TrainOptions& options, const Dataset& dataset,
                                                  const Collective& collective) {
  // Stream (site, rank, k) reads shard ((site · ranks) + rank) · K + k of
  // sites · ranks · K shards of the training items, laid out by the split.
  const std::size_t ranks = static_cast<std::size_t>(collective.size());
  const std::size_t k_count = options.micro_batches;
  const std::size_t shards = options.data.site_shards * ranks * k_count;
  std::vector<Sampler> samplers;
  for (std::size_t k = 0; k < k_count; ++k) {
    const std::size_t shard =
        (options.data.site_shard * ranks + static_cast<std::size_t>(collective.rank())) * k_count + k;
    auto s = Sampler::create(dataset.train_items(), shard, shards, options.seed, dataset.epochs(), options.data.split);
    if (!s.ok()) return s.status();
    samplers.push_back(std::move(*s));
  }
  return samplers;
}

Result<EvalResult> evaluate_dataset(const Dataset& dataset, std::size_t eval_batch,
                                    const std::function<Result<EvalResult>(const Batch&)>& evaluate_batch) {
  EvalResult total;
  double loss_sum = 0.0;
  const std::size_t n = dataset.eval_items();
  GEOLOCO_RETURN_IF(n == 0, Err::invalid_argument, "evaluate: the dataset has no evaluation items");
  std::vector<std::size_t> items;
  Batch batch;
  for (std::size_t first = 0; first < n; first += eval_batch) {
    items.clear();
    for (std::size_t i = first; i < std::min(n, first + eval_batch); ++i) items.push_back(i);
    dataset.eval_batch(items, batch);
    auto r = evaluate_batch(batch);
    if (!r.ok()) return r.status();
    loss_sum += r->loss * static_cast<double>(r->predictions);
    total.correct += r->correct;
    total.predictions += r->predictions;
  }
  total.loss = loss_sum / static_cast<double>(total.predictions);
  return total;
}

TrainerFactory Trainer::factory() {
  return [](const TrainOptions& options, Collective& collective, std::shared_ptr<const Dataset> dataset,
            std::span<float> host_storage, bool initialize) -> Result<std::unique_ptr<InnerTrainer>> {
    auto t = Trainer::create(options, collective, std::move(dataset), host_storage, initialize);
    if (!t.ok()) return t.status();
    return std::unique_ptr<InnerTrainer>(std::move(*t));
  };
}

Trainer::Trainer(const TrainOptions& options, Collective& collective, std::shared_ptr<const Dataset> dataset,
                 std::unique_ptr<Model> model)
    : options_(options), collective_(collective), dataset_(std::move(dataset)), model_(std::move(model)) {}

Result<StepStats> Trainer::step() {
  StepStats stats;
  stats.step = step_;
  double loss_sum = 0.0;
  for (std::size_t k = 0; k < samplers_.size(); ++k) {
    samplers_[k].next(options_.batch, items_);
    dataset_->train_batch(items_, batch_);
    // The first micro-batch writes grads_ directly; later ones go through a
    // scratch buffer and are added in k order (see the file comment).
    std::span<float> target = k == 0 ? std::span<float>(grads_) : std::span<float>(micro_grads_);
    auto loss = model_->forward_backward(params_, batch_, target);
    if (!loss.ok()) return loss.status();
    if (k > 0)
      for (std::size_t i = 0; i < grads_.size(); ++i) grads_[i] += micro_grads_[i];
    loss_sum += *loss;
    stats.work_units += model_->work_units(batch_);
  }
  GEOLOCO_TRY(collective_.allreduce_sum(grads_));
  const std::size_t parts = samplers_.size() * static_cast<std::size_t>(collective_.size());
  if (parts > 1) {
    const float scale = 1.0f / static_cast<float>(parts);
    for (float& g : grads_) g *= scale;
  }
  // The loss is only reported: one float per rank is enough.
  float loss_f = static_cast<float>(loss_sum);
  GEOLOCO_TRY(collective_.allreduce_sum(std::span<float>(&loss_f, 1)));
  stats.loss = static_cast<double>(loss_f) / static_cast<double>(parts);
  stats.work_units *= static_cast<std::uint64_t>(collective_.size());

  auto norm = clip_global_norm(grads_, options_.clip_norm);
  if (!norm.ok()) return norm.status();
  stats.grad_norm = *norm;
  stats.lr = learning_rate(options_.schedule, step_);
  GEOLOCO_TRY(adamw_->step(params_, grads_, stats.lr));
  ++step_;
  return stats;
}

Status Trainer::resume_at(std::uint64_t step) {
  GEOLOCO_RETURN_IF(step < step_, Err::invalid_argument, "trainer: cannot resume at step ", step, ", ", step_,
                    " steps are done already");
  // The same draws step() makes, in the same order: each stream's position
  // (epoch, permutation, cursor or generator state) ends up as after training.
  for (; step_ < step; ++step_)
    for (auto& sampler : samplers_) sampler.next(options_.batch, items_);
  return {};
}

Result<EvalResult> Trainer::evaluate() {
  return evaluate_dataset(*dataset_, options_.eval_batch,
                          [this](const Batch& batch) { return model_->evaluate(params_, batch); });
}

}  // namespace geoloco::inner
