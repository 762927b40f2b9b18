// Internal to inner/cuda/: the constructors make_device_model() picks from,
// and the tail every runner's evaluate() shares.
#pragma once

#include <memory>

#include "inner/cuda/device_model.h"
#include "inner/models/gpt.h"

namespace geoloco::inner::cuda {

Result<std::unique_ptr<DeviceModel>> make_device_mlp(Context& ctx, const ParamLayout& layout);
Result<std::unique_ptr<DeviceModel>> make_device_gpt(Context& ctx, const ParamLayout& layout,
                                                     const GptOptions& options);

/// Copies the device loss and correct count back (waits for the stream).
Result<EvalResult> read_eval(Context& ctx, const DeviceBuffer<double>& loss,
                             const DeviceBuffer<unsigned long long>& correct, std::size_t predictions);

}  // namespace geoloco::inner::cuda
