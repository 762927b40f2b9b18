#include "inner/cuda/cuda_model.h"

namespace geoloco::inner::cuda {

Result<std::unique_ptr<CudaModel>> CudaModel::create(Context& ctx, std::unique_ptr<Model> reference) {
  GEOLOCO_RETURN_IF(reference == nullptr, Err::invalid_argument, "CudaModel: no reference model");
  auto device = make_device_model(ctx, *reference);
  if (!device.ok()) return device.status();
  return std::unique_ptr<CudaModel>(new CudaModel(ctx, std::move(reference), std::move(*device)));
}

Status CudaModel::load(std::span<const float> params, const Batch& batch) {
  GEOLOCO_RETURN_IF(params.size() != layout().total(), Err::invalid_argument, name(), ": ", params.size(),
                    " parameters given, the layout has ", layout().total());
  GEOLOCO_TRY(device_->upload(batch));  // checks the batch before any parameter moves
  return params_.assign(params, ctx_.stream());
}

Result<double> CudaModel::forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) {
  GEOLOCO_RETURN_IF(grads.size() != layout().total(), Err::invalid_argument, name(), ": ", grads.size(),
                    " gradients given, the layout has ", layout().total());
  GEOLOCO_TRY(load(params, batch));
  if (grads_.size() != grads.size()) GEOLOCO_TRY(grads_.allocate(grads.size()));
  auto loss = device_->forward_backward(params_.data(), grads_.data());
  if (!loss.ok()) return loss.status();
  GEOLOCO_TRY(grads_.copy_to(grads, ctx_.stream()));
  return *loss;
}

Result<EvalResult> CudaModel::evaluate(std::span<const float> params, const Batch& batch) {
  GEOLOCO_TRY(load(params, batch));
  return device_->evaluate(params_.data());
}

}  // namespace geoloco::inner::cuda
