// The intra-site collective on GPUs: NCCL, one process per GPU
// (inner/collective/collective.h; the CPU twin is ShmCollective). Spans are
// DEVICE memory; work is queued on the Context's stream and each call
// returns when it has completed, so its semantics match the CPU collectives.
//
// Host spans are accepted too and staged: copied into a device buffer,
// reduced or broadcast there, copied back. The training loop and
// SyncedTraining exchange small host values through the collective (a
// phase-end flag, a sync outcome, round counters, AdamW moments at a
// restart), and this keeps them backend-blind. cudaPointerGetAttributes
// tells the two apart; only cudaMemoryTypeDevice memory goes to NCCL as is.
//
// Bootstrap, following the CPU collective's launch path (collective/launch.h):
// the launcher (geoloco-train --workers, mpirun, srun) gives every process
// its rank, size and run id. Rank 0 draws an ncclUniqueId and publishes it as
// a file named after the run id, written to a temporary name and renamed, so
// a reader never sees half of it; the other ranks wait for the file, read the
// id, and all call ncclCommInitRank. Rank 0 deletes the file once the group
// is formed (every rank has read it by then). On one node the default
// directory /dev/shm works; a site spanning nodes points id_dir (or
// GEOLOCO_NCCL_ID_DIR) at a filesystem all its nodes share. A file left by a
// crashed run with the SAME run id could be read by a fast rank before rank 0
// replaces it; that rank then fails to connect and times out. Launcher run
// ids (Slurm job.step, Open MPI job id) are unique per run, so this needs a
// reused GEOLOCO_RUN_ID.
//
// Failure: the communicator is non-blocking and every wait polls
// ncclCommGetAsyncError under a deadline, so a peer that dies or never comes
// gives `timeout` (or `io`) instead of a hang; the communicator is then
// aborted and every later call fails at once, as the interface promises.
//
// Summation order: NCCL picks its ring or tree, not rank order, so the sum is
// not bit-identical to ShmCollective's ((x0 + x1) + x2) …; it is the same
// bits on every rank of the group, which is what data parallelism needs.
#pragma once

#include <nccl.h>

#include <functional>
#include <memory>
#include <string>

#include "inner/collective/collective.h"
#include "inner/collective/launch.h"
#include "inner/cuda/device.h"

namespace geoloco::inner::cuda {

struct NcclOptions {
  /// Where rank 0 publishes the unique id. Empty: $GEOLOCO_NCCL_ID_DIR, else
  /// /dev/shm (single node).
  std::string id_dir;
  int timeout_ms = 600'000;  ///< longest wait for the id file, the group, or one collective; > 0
};

/// The GPU this process should use: its local rank modulo the visible devices.
int local_device(const LaunchInfo& launch, int device_count);

class NcclCollective final : public Collective {
 public:
  /// Joins the group of `launch` on ctx.device(). `ctx` must outlive the
  /// collective. Errors: invalid_argument (options, run id), io (the id file,
  /// NCCL), timeout (the id file or a peer did not come).
  static Result<std::unique_ptr<NcclCollective>> create(const LaunchInfo& launch, Context& ctx,
                                                        NcclOptions options = {});
  ~NcclCollective() override;
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  Status allreduce_sum(std::span<float> data) override;
  /// ncclAvg: the division happens inside NCCL, on the device.
  Status allreduce_average(std::span<float> data) override;
  Status broadcast(std::span<float> data, int root) override;
  Status barrier() override;

  /// The Context whose stream every collective runs on.
  Context& context() { return ctx_; }

 private:
  NcclCollective(Context& ctx, int rank, int size, NcclOptions options)
      : ctx_(ctx), rank_(rank), size_(size), options_(std::move(options)) {}
  Status allreduce(std::span<float> data, ncclRedOp_t op);
  /// Runs `enqueue` (an NCCL call on a device pointer) on `data`, staging
  /// host memory through stage_, and waits for it (finish()).
  Status run(std::span<float> data, const char* call, const std::function<ncclResult_t(float*)>& enqueue);
  /// Waits for the queued collective under the deadline; aborts on failure.
  Status finish(Status launched);
  Status wait_comm();

  Context& ctx_;
  int rank_;
  int size_;
  NcclOptions options_;
  ncclComm_t comm_ = nullptr;
  DeviceBuffer<float> token_;  // barrier()'s one float
  DeviceBuffer<float> stage_;  // host spans pass through here (grows, never shrinks)
  Status failed_;              // set once the group is unusable
};

}  // namespace geoloco::inner::cuda
