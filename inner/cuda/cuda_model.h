// CudaModel: a CPU model's twin that computes on the GPU behind the host-side
// Model interface (inner/models/model.h), so code written for host buffers
// (the trainer's step, the tests) can switch backends without change. Each
// forward_backward copies the parameters in and the gradients out; a trainer
// that keeps its parameters on the device uses DeviceModel directly and
// saves those copies.
#pragma once

#include <memory>

#include "inner/cuda/device_model.h"

namespace geoloco::inner::cuda {

class CudaModel final : public Model {
 public:
  /// Wraps `reference` (which keeps answering layout, init, FLOPs and decay
  /// ranges). `ctx` must outlive the model. Errors: those of make_device_model.
  static Result<std::unique_ptr<CudaModel>> create(Context& ctx, std::unique_ptr<Model> reference);

  std::string name() const override { return reference_->name(); }
  const ParamLayout& layout() const override { return reference_->layout(); }
  void init(std::span<float> params, std::uint64_t seed) const override { reference_->init(params, seed); }
  Result<double> forward_backward(std::span<const float> params, const Batch& batch, std::span<float> grads) override;
  Result<EvalResult> evaluate(std::span<const float> params, const Batch& batch) override;
  std::size_t work_units(const Batch& batch) const override { return reference_->work_units(batch); }
  std::string work_unit_name() const override { return reference_->work_unit_name(); }
  double train_flops(std::size_t samples) const override { return reference_->train_flops(samples); }
  GemmShape largest_gemm(std::size_t samples) const override { return reference_->largest_gemm(samples); }
  std::vector<std::pair<std::size_t, std::size_t>> decay_ranges() const override { return reference_->decay_ranges(); }

  DeviceModel& device_model() { return *device_; }

 private:
  CudaModel(Context& ctx, std::unique_ptr<Model> reference, std::unique_ptr<DeviceModel> device)
      : ctx_(ctx), reference_(std::move(reference)), device_(std::move(device)) {}
  Status load(std::span<const float> params, const Batch& batch);

  Context& ctx_;
  std::unique_ptr<Model> reference_;
  std::unique_ptr<DeviceModel> device_;
  DeviceBuffer<float> params_, grads_;
};

}  // namespace geoloco::inner::cuda
