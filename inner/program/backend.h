// geoloco-train's --backend: which InnerTrainer (inner_trainer.h) computes
// a worker's steps, and which collective the site's workers meet in.
//
//   cpu   Trainer (the CPU reference); ShmCollective among worker processes,
//         SingleCollective alone. The default.
//   cuda  cuda::DeviceTrainer on GPU (local rank mod visible devices), one
//         process per GPU; NcclCollective, SingleCollective alone.
//
// A binary built without CUDA (no nvcc at build time) refuses cuda; one
// built with it refuses when the CUDA runtime finds no device, naming
// cudaGetDeviceCount's answer. Both refusals are Err::unsupported, which
// geoloco-train turns into exit code 2.
#pragma once

#include <memory>
#include <string>

#include "inner/collective/collective.h"
#include "inner/collective/launch.h"
#include "inner/train/inner_trainer.h"

namespace geoloco::inner {

/// Whether this binary was built with the CUDA backend (nvcc was found).
bool built_with_cuda();

/// Whether this binary on this machine can run backend `name`; cheap, so
/// geoloco-train asks before it starts any worker. Errors: invalid_argument
/// (neither cpu nor cuda), unsupported ("this geoloco-train was built
/// without CUDA (no nvcc at build time)"; "no CUDA device: cudaGetDeviceCount
/// returned …").
Status check_backend(const std::string& name);

struct BackendOptions {
  std::string name = "cpu";  ///< "cpu" or "cuda"
  int timeout_ms = 600'000;  ///< longest wait for a peer worker (rendezvous and collectives), > 0
};

/// One worker's backend: the collective of its group and the trainers it
/// makes. Trainers keep references into it: destroy them first.
class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu" or "cuda".
  virtual std::string name() const = 0;
  /// For the banner: "cpu backend", "cuda backend, device 0 of 8 (NVIDIA H200)".
  virtual std::string describe() const = 0;
  virtual Collective& collective() = 0;
  /// Makes this backend's trainers (SyncedTraining::start takes it too).
  virtual TrainerFactory trainer_factory() = 0;
};

/// The backend of the worker `launch` describes. Errors: check_backend's,
/// the collective's (rendezvous, timeout), the device's.
Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options, const LaunchInfo& launch);

}  // namespace geoloco::inner
