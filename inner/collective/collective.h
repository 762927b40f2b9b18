// The intra-site collective: what the data-parallel workers of ONE site use
// to agree on a gradient (docs/design.md §3). Nothing here knows about sites; the
// cross-site exchange is the daemon's.
//
// Implementations: SingleCollective (one worker), ShmCollective (CPU worker
// processes on one machine, shared memory), and later an NCCL one in
// inner/cuda/. Spans are views of the memory the backend works on: host
// memory for the CPU ones, device memory for NCCL; the caller never copies.
//
// Every rank must call the same collectives in the same order with the same
// sizes (as with MPI and NCCL). A rank that fails or times out leaves the
// group unusable: the others get an error instead of hanging.
#pragma once

#include <span>
#include <string>

#include "common/status.h"

namespace geoloco::inner {

class Collective {
 public:
  virtual ~Collective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "single", "shm", "nccl".
  virtual std::string backend() const = 0;

  /// Replaces `data` on every rank with the element-wise sum over ranks.
  /// CPU implementations sum in rank order, ((x0 + x1) + x2) + …, so the
  /// result is the same bits on every rank and in every run. Errors: timeout
  /// (a peer did not arrive), io, invalid_argument (sizes differ).
  virtual Status allreduce_sum(std::span<float> data) = 0;

  /// The sum divided by size(): allreduce_sum, then one multiplication by
  /// 1/size in fp32 (so two ranks give exactly (x0 + x1) · 0.5). This
  /// default touches `data` on the host; a device backend overrides it
  /// (NCCL's ncclAvg).
  virtual Status allreduce_average(std::span<float> data) {
    GEOLOCO_TRY(allreduce_sum(data));
    if (size() > 1) {
      const float scale = 1.0f / static_cast<float>(size());
      for (float& x : data) x *= scale;
    }
    return {};
  }

  /// Copies `data` of rank `root` into `data` of every other rank.
  virtual Status broadcast(std::span<float> data, int root) = 0;

  /// Returns once every rank has called it.
  virtual Status barrier() = 0;
};

/// The collective of a single worker: every operation is the identity.
class SingleCollective final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  Status allreduce_sum(std::span<float>) override { return {}; }
  Status broadcast(std::span<float>, int root) override {
    GEOLOCO_RETURN_IF(root != 0, Err::invalid_argument, "broadcast: root ", root, " is not a rank of a group of 1");
    return {};
  }
  Status barrier() override { return {}; }
};

}  // namespace geoloco::inner
