#include "inner/cuda/device_trainer.h"

#include "inner/cuda/clip.cuh"
#include "inner/cuda/nccl_collective.h"
#include "inner/cuda/residual.cuh"
#include "inner/optim/schedule.h"
#include "inner/train/trainer.h"

namespace geoloco::inner::cuda {

Result<std::unique_ptr<DeviceTrainer>> DeviceTrainer::create(Context& ctx, const TrainOptions& options,
                                                             Collective& collective,
                                                             std::shared_ptr<const Dataset> dataset,
                                                             std::span<float> host_storage, bool initialize) {
  GEOLOCO_RETURN_IF(dataset == nullptr, Err::invalid_argument, "trainer: no dataset");
  // ShmCollective would read device pointers as host memory.
  GEOLOCO_RETURN_IF(collective.backend() != "nccl" && collective.backend() != "single", Err::invalid_argument,
                    "the CUDA trainer needs a collective that works on device memory (nccl, or single for one "
                    "worker), got '",
                    collective.backend(), "'");
  if (auto* nccl = dynamic_cast<NcclCollective*>(&collective))
    GEOLOCO_RETURN_IF(&nccl->context() != &ctx, Err::invalid_argument,
                      "the CUDA trainer and its NCCL collective must share one Context (one stream orders both)");
  auto model = make_model(options);
  if (!model.ok()) return model.status();
  GEOLOCO_TRY((*model)->layout().validate());
  auto runner = make_device_model(ctx, **model);
  if (!runner.ok()) return runner.status();
  std::unique_ptr<DeviceTrainer> t(
      new DeviceTrainer(ctx, options, collective, std::move(dataset), std::move(*model), std::move(*runner)));
  const std::size_t total = t->layout().total();
  if (host_storage.empty()) {
    t->owned_host_.assign(total, 0.0f);
    t->host_ = t->owned_host_;
  } else {
    GEOLOCO_RETURN_IF(host_storage.size() != total, Err::invalid_argument, "trainer: parameter storage holds ",
                      host_storage.size(), " floats, the ", options.model, " layout needs ", total);
    t->host_ = host_storage;
  }
  GEOLOCO_TRY(t->params_.allocate(total));
  GEOLOCO_TRY(t->grads_.allocate(total));  // every forward_backward overwrites it
  if (options.micro_batches > 1) GEOLOCO_TRY(t->micro_grads_.allocate(total));
  GEOLOCO_TRY(t->loss_.allocate(1));
  auto adamw = AdamW::create(ctx, total, options.adamw, t->model_->decay_ranges());
  if (!adamw.ok()) return adamw.status();
  t->adamw_ = std::move(*adamw);
  auto samplers = make_worker_samplers(options, *t->dataset_, collective);
  if (!samplers.ok()) return samplers.status();
  t->samplers_ = std::move(*samplers);

  // As the CPU Trainer: rank 0 initializes from the seed and everyone takes
  // rank 0's bits by broadcast (here of the device parameters).
  if (initialize && collective.rank() == 0) t->model_->init(t->host_, options.seed);
  GEOLOCO_TRY(t->params_.assign(t->host_, ctx.stream()));
  if (initialize) GEOLOCO_TRY(t->broadcast_params(0));
  return t;
}

TrainerFactory DeviceTrainer::factory(Context& ctx) {
  return [&ctx](const TrainOptions& options, Collective& collective, std::shared_ptr<const Dataset> dataset,
                std::span<float> host_storage, bool initialize) -> Result<std::unique_ptr<InnerTrainer>> {
    auto t = DeviceTrainer::create(ctx, options, collective, std::move(dataset), host_storage, initialize);
    if (!t.ok()) return t.status();
    return std::unique_ptr<InnerTrainer>(std::move(*t));
  };
}

DeviceTrainer::DeviceTrainer(Context& ctx, const TrainOptions& options, Collective& collective,
                             std::shared_ptr<const Dataset> dataset, std::unique_ptr<Model> model,
                             std::unique_ptr<DeviceModel> runner)
    : ctx_(ctx),
      options_(options),
      collective_(collective),
      dataset_(std::move(dataset)),
      model_(std::move(model)),
      runner_(std::move(runner)) {}

Result<StepStats> DeviceTrainer::step() {
  StepStats stats;
  stats.step = step_;
  const std::size_t n = params_.size();
  double loss_sum = 0.0;
  for (std::size_t k = 0; k < samplers_.size(); ++k) {
    samplers_[k].next(options_.batch, items_);
    dataset_->train_batch(items_, batch_);
    // The first micro-batch writes grads_ directly; later ones go through
    // micro_grads_ and are added in k order (trainer.h's file comment).
    float* target = k == 0 ? grads_.data() : micro_grads_.data();
    GEOLOCO_TRY(runner_->upload(batch_));
    auto loss = runner_->forward_backward(params_.data(), target);
    if (!loss.ok()) return loss.status();
    if (k > 0) GEOLOCO_TRY(residual_forward(ctx_, grads_.data(), grads_.data(), micro_grads_.data(), n));
    loss_sum += *loss;
    stats.work_units += model_->work_units(batch_);
  }
  GEOLOCO_TRY(collective_.allreduce_sum(std::span<float>(grads_.data(), n)));
  const std::size_t parts = samplers_.size() * static_cast<std::size_t>(collective_.size());
  if (parts > 1) GEOLOCO_TRY(scale(ctx_, grads_.data(), n, 1.0f / static_cast<float>(parts)));
  // The loss is only reported: one float per rank, summed on the device.
  float loss_f = static_cast<float>(loss_sum);
  GEOLOCO_TRY(loss_.assign(std::span<const float>(&loss_f, 1), ctx_.stream()));
  GEOLOCO_TRY(collective_.allreduce_sum(std::span<float>(loss_.data(), 1)));
  GEOLOCO_TRY(loss_.copy_to(std::span<float>(&loss_f, 1), ctx_.stream()));
  stats.loss = static_cast<double>(loss_f) / static_cast<double>(parts);
  stats.work_units *= static_cast<std::uint64_t>(collective_.size());

  auto norm = clip_global_norm(ctx_, grads_.data(), n, options_.clip_norm);
  if (!norm.ok()) return norm.status();
  stats.grad_norm = *norm;
  stats.lr = learning_rate(options_.schedule, step_);
  GEOLOCO_TRY(adamw_->step(ctx_, params_.data(), grads_.data(), stats.lr));
  ++step_;
  return stats;
}

Status DeviceTrainer::resume_at(std::uint64_t step) {
  GEOLOCO_RETURN_IF(step < step_, Err::invalid_argument, "trainer: cannot resume at step ", step, ", ", step_,
                    " steps are done already");
  // The same draws step() makes, in the same order (Trainer::resume_at).
  for (; step_ < step; ++step_)
    for (auto& sampler : samplers_) sampler.next(options_.batch, items_);
  return {};
}

Result<EvalResult> DeviceTrainer::evaluate() {
  // The runner resizes its activations to each batch it is given: the
  // evaluation chunks, then the next training batch (a few allocations per
  // evaluation, no second set of activations held for the whole run).
  return evaluate_dataset(*dataset_, options_.eval_batch, [this](const Batch& batch) -> Result<EvalResult> {
    GEOLOCO_TRY(runner_->upload(batch));
    return runner_->evaluate(params_.data());
  });
}

Status DeviceTrainer::params_to_host() { return params_.copy_to(host_, ctx_.stream()); }

Status DeviceTrainer::params_from_host() { return params_.assign(host_, ctx_.stream()); }

Status DeviceTrainer::broadcast_params(int root) { return collective_.broadcast(device_params(), root); }

Result<OptimizerState> DeviceTrainer::optimizer_state() {
  m_host_.resize(adamw_->parameters());
  v_host_.resize(adamw_->parameters());
  GEOLOCO_TRY(adamw_->download_moments(ctx_, m_host_, v_host_));
  return OptimizerState{adamw_->steps(), m_host_, v_host_};
}

Status DeviceTrainer::restore_optimizer(std::span<const float> m, std::span<const float> v, std::uint64_t steps) {
  return adamw_->restore(ctx_, m, v, steps);
}

}  // namespace geoloco::inner::cuda
