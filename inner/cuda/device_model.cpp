#include "inner/cuda/device_model.h"

#include "inner/cuda/runners.h"

namespace geoloco::inner::cuda {

Result<std::unique_ptr<DeviceModel>> make_device_model(Context& ctx, const Model& reference) {
  if (const auto* gpt = dynamic_cast<const Gpt*>(&reference))
    return make_device_gpt(ctx, gpt->layout(), gpt->options());
  if (reference.name() == "mlp") return make_device_mlp(ctx, reference.layout());
  return GEOLOCO_ERROR(Err::unsupported, "the CUDA backend has no runner for model '", reference.name(), "'");
}

Result<EvalResult> read_eval(Context& ctx, const DeviceBuffer<double>& loss,
                             const DeviceBuffer<unsigned long long>& correct, std::size_t predictions) {
  EvalResult r;
  unsigned long long hits = 0;
  GEOLOCO_TRY(loss.copy_to(std::span<double>(&r.loss, 1), ctx.stream()));
  GEOLOCO_TRY(correct.copy_to(std::span<unsigned long long>(&hits, 1), ctx.stream()));
  r.correct = static_cast<std::size_t>(hits);
  r.predictions = predictions;
  return r;
}

}  // namespace geoloco::inner::cuda
