// Device-side model runners: `mlp` and `gpt` computed on one GPU from the
// SAME flat parameter buffer layout as the CPU models (inner/layout.h), so
// the daemon's shared-memory buffer, the CPU reference and the GPU all speak
// of the same floats. Parameters and gradients are device pointers here;
// CudaModel (cuda_model.h) wraps a runner behind the host-side Model
// interface for code that holds host buffers.
//
// Each runner repeats its CPU model's forward and backward pass op for op
// (inner/models/mlp.cpp, gpt.cpp) with the inner/cuda/ ops in place of the
// inner/cpu/ ones, so a difference between the two is an op's difference,
// which the backend test pins down per op.
#pragma once

#include <memory>
#include <string>

#include "inner/cuda/device.h"
#include "inner/layout.h"
#include "inner/models/model.h"

namespace geoloco::inner::cuda {

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;

  virtual std::string name() const = 0;
  virtual const ParamLayout& layout() const = 0;

  /// Checks `batch` with the CPU model's rules (shape, labels or tokens in
  /// range) and copies it to the device, where it stays for the calls below.
  /// Errors: invalid_argument, io.
  virtual Status upload(const Batch& batch) = 0;

  /// Mean loss of the uploaded batch at device `params` (layout().total()
  /// floats); OVERWRITES device `grads` with its gradient. The work is queued
  /// on the Context's stream; the call returns once the loss (8 bytes) has
  /// come back. Errors: invalid_argument (no batch uploaded), io.
  virtual Result<double> forward_backward(const float* params, float* grads) = 0;

  /// Loss and argmax accuracy of the uploaded batch, forward only.
  virtual Result<EvalResult> evaluate(const float* params) = 0;
};

/// A runner for the CPU model `reference` ("mlp" or "gpt"), with its sizes
/// and layout. `ctx` must outlive the runner. Errors: unsupported (another
/// model), io (device memory).
Result<std::unique_ptr<DeviceModel>> make_device_model(Context& ctx, const Model& reference);

}  // namespace geoloco::inner::cuda
