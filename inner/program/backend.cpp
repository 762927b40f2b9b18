#include "inner/program/backend.h"

#include "inner/collective/shm_collective.h"
#include "inner/program/build_config.h"
#include "inner/train/trainer.h"

#if GEOLOCO_HAVE_CUDA
#include "inner/cuda/device.h"
#include "inner/cuda/device_trainer.h"
#include "inner/cuda/nccl_collective.h"
#endif

namespace geoloco::inner {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::unique_ptr<Collective> collective) : collective_(std::move(collective)) {}
  std::string name() const override { return "cpu"; }
  std::string describe() const override { return "cpu backend"; }
  Collective& collective() override { return *collective_; }
  TrainerFactory trainer_factory() override { return Trainer::factory(); }

 private:
  std::unique_ptr<Collective> collective_;
};

#if GEOLOCO_HAVE_CUDA
class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> create(const BackendOptions& options, const LaunchInfo& launch) {
    std::string why;
    const int devices = cuda::device_count(&why);
    GEOLOCO_RETURN_IF(devices == 0, Err::unsupported, "no CUDA device: ", why);
    // Rank r takes device r mod devices (local ranks on a node); NCCL
    // refuses two ranks of one group on one device, so say it plainly.
    GEOLOCO_RETURN_IF(launch.size > 1 && launch.local_size > devices, Err::invalid_argument, "--backend cuda runs one ",
                      "worker per GPU: this node has ", launch.local_size, " workers but ", devices,
                      " CUDA device(s) (NCCL refuses two ranks on one device)");
    std::unique_ptr<CudaBackend> b(new CudaBackend());
    cuda::ContextOptions context;
    context.device = cuda::local_device(launch, devices);
    auto ctx = cuda::Context::create(context);
    if (!ctx.ok()) return ctx.status();
    b->ctx_ = std::move(*ctx);
    cudaDeviceProp prop{};
    GEOLOCO_CUDA_CHECK(cudaGetDeviceProperties(&prop, context.device));
    b->describe_ = cat("cuda backend, device ", context.device, " of ", devices, " (", prop.name, ")");
    if (launch.size == 1) {
      b->collective_ = std::make_unique<SingleCollective>();
    } else {
      cuda::NcclOptions nccl;
      nccl.timeout_ms = options.timeout_ms;
      auto c = cuda::NcclCollective::create(launch, *b->ctx_, nccl);
      if (!c.ok()) return c.status();
      b->collective_ = std::move(*c);
    }
    return std::unique_ptr<Backend>(std::move(b));
  }

  std::string name() const override { return "cuda"; }
  std::string describe() const override { return describe_; }
  Collective& collective() override { return *collective_; }
  TrainerFactory trainer_factory() override { return cuda::DeviceTrainer::factory(*ctx_); }

 private:
  CudaBackend() = default;
  // Declared first, destroyed last: the collective and the trainers use it.
  std::unique_ptr<cuda::Context> ctx_;
  std::unique_ptr<Collective> collective_;
  std::string describe_;
};
#endif

}  // namespace

bool built_with_cuda() { return GEOLOCO_HAVE_CUDA == 1; }

Status check_backend(const std::string& name) {
  if (name == "cpu") return {};
  GEOLOCO_RETURN_IF(name != "cuda", Err::invalid_argument, "--backend must be 'cpu' or 'cuda', got '", name, "'");
#if GEOLOCO_HAVE_CUDA
  std::string why;
  GEOLOCO_RETURN_IF(cuda::device_count(&why) == 0, Err::unsupported, "no CUDA device: ", why);
  return {};
#else
  return GEOLOCO_ERROR(Err::unsupported, "this geoloco-train was built without CUDA (no nvcc at build time)");
#endif
}

Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& options, const LaunchInfo& launch) {
  GEOLOCO_TRY(check_backend(options.name));
  GEOLOCO_RETURN_IF(options.timeout_ms <= 0, Err::invalid_argument, "the worker timeout must be > 0 ms");
#if GEOLOCO_HAVE_CUDA
  if (options.name == "cuda") return CudaBackend::create(options, launch);
#endif
  ShmCollectiveOptions shm;
  shm.timeout_ms = options.timeout_ms;
  auto collective = make_cpu_collective(launch, shm);
  if (!collective.ok()) return collective.status();
  return std::unique_ptr<Backend>(new CpuBackend(std::move(*collective)));
}

}  // namespace geoloco::inner
