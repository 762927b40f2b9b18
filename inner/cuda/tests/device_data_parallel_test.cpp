// Data parallelism on the CUDA backend, as `geoloco-train --backend cuda
// --workers 2` runs it: 2 worker processes, one per device, joined by
// NcclCollective (rank 0 publishes the unique id under the launcher's run
// id), each training with a DeviceTrainer on its share of the batch. Checked:
//   * both ranks end with the same bits (NCCL gives every rank the same sums);
//   * they end where the CPU Trainer ends on one worker with 2 micro-batches,
//     the same samples (the CPU data-parallel test's equivalence), within
//     the rounding that device_trainer_test.cpp argues for one worker.
//
// The parent never touches CUDA (a forked child cannot use a context made
// before the fork), which is why this is a test program of its own. Each
// child checks the device count; with fewer than 2 devices (a one-GPU
// machine, where NCCL refuses two ranks on one device) the case prints
// "SKIPPED: fewer than 2 CUDA devices" and ctest reports a skip. On the
// CUDA emulator ctest gives it 2 devices (GEOLOCO_CUDA_EMULATOR_DEVICES=2).
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "inner/collective/launch.h"
#include "inner/cpu/blas.h"
#include "inner/cuda/device.h"
#include "inner/cuda/device_trainer.h"
#include "inner/cuda/nccl_collective.h"
#include "inner/cuda/tests/gpu_test.h"
#include "inner/tests/fork_ranks.h"
#include "inner/tests/synthetic_data.h"
#include "inner/tests/temp_files.h"
#include "inner/train/run_training.h"
#include "inner/train/trainer.h"

using namespace geoloco;
using namespace geoloco::inner;
namespace gpu = geoloco::inner::cuda;
using gpu::testing::nmse;

namespace {

constexpr int kSkipped = 77;

/// Each rank computes one of small_mlp_options()'s 2 micro-batches.
TrainOptions mlp_options() {
  TrainOptions o = gpu::testing::small_mlp_options();
  o.micro_batches = 1;
  return o;
}

/// One rank: its device, the NCCL group, training, the final parameters to a file.
int train_rank(int rank, const TrainOptions& o, std::shared_ptr<const Dataset> data, const std::string& out) {
  const auto fail = [rank](int code, const Status& s) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
    return code;
  };
  cpu::set_blas_threads(1);
  auto launch = launch_info_from_env();
  if (!launch.ok()) return fail(1, launch.status());
  const int devices = gpu::device_count();
  if (devices < 2) return kSkipped;
  gpu::ContextOptions copts;
  copts.device = gpu::local_device(*launch, devices);
  auto ctx = gpu::Context::create(copts);
  if (!ctx.ok()) return fail(2, ctx.status());
  gpu::NcclOptions nopts;
  nopts.timeout_ms = 60'000;
  auto nccl = gpu::NcclCollective::create(*launch, **ctx, nopts);
  if (!nccl.ok()) return fail(3, nccl.status());
  auto t = gpu::DeviceTrainer::create(**ctx, o, **nccl, std::move(data));
  if (!t.ok()) return fail(4, t.status());
  if (auto r = run_training(**t); !r.ok()) return fail(5, r.status());
  if (auto s = (*t)->params_to_host(); !s.ok()) return fail(6, s);
  return testing::write_floats(out, (*t)->host_params()) ? 0 : 7;
}

}  // namespace

TEST_CASE("2 CUDA worker processes over NCCL = 1 CPU worker with 2 micro-batches", "[cuda][nccl][data-parallel]") {
  const TrainOptions o = mlp_options();
  auto data = testing::synthetic_image_dataset();
  testing::TempDir dir("geoloco-cuda-dp-test");  // made by the parent: the children write into it
  const auto result = [&](int rank) { return cat(dir.path, "/rank", rank, ".bin"); };
  const auto codes = testing::fork_ranks(2, [&](int rank) { return train_rank(rank, o, data, result(rank)); });
  if (codes == std::vector<int>{kSkipped, kSkipped}) {
    WARN("SKIPPED: fewer than 2 CUDA devices (NCCL runs one rank per device)");
    return;
  }
  REQUIRE(codes == std::vector<int>{0, 0});
  const auto rank0 = testing::take_floats(result(0)), rank1 = testing::take_floats(result(1));
  REQUIRE(!rank0.empty());
  CHECK(rank0 == rank1);  // bit for bit

  cpu::set_blas_threads(1);
  TrainOptions single = o;
  single.micro_batches = 2;
  SingleCollective one;
  auto ref = Trainer::create(single, one, data);
  REQUIRE(ref.ok());
  std::vector<float> start((*ref)->params().begin(), (*ref)->params().end());
  REQUIRE(run_training(**ref).ok());
  const auto cpu = (*ref)->params();
  REQUIRE(cpu.size() == rank0.size());
  // NMSE of the updates, as device_trainer_test.cpp bounds them for one
  // worker (~1e-12 from rounding; a wrong average or a missed rank's
  // gradient is off by tens of percent).
  std::vector<float> du_gpu(start.size()), du_cpu(start.size());
  for (std::size_t i = 0; i < start.size(); ++i) {
    du_gpu[i] = rank0[i] - start[i];
    du_cpu[i] = cpu[i] - start[i];
  }
  const double e = nmse(du_gpu.data(), du_cpu.data(), du_gpu.size());
  INFO("NMSE of the parameter updates, 2 CUDA ranks vs the CPU: " << e);
  CHECK(e <= 1e-4);
  CHECK(rank0 != start);  // training moved the parameters (the comparison is not vacuous)
}
