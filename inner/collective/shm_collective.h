// The CPU intra-site collective: worker PROCESSES on one machine meeting in
// a POSIX shared-memory segment. It exists so that data parallelism is
// exercised on machines without GPUs (docs/design.md §3); on GPUs NCCL replaces it.
//
// Segment: a header (magic, sizes, barrier counters, each rank's pid), a
// per-rank slot of `slot_floats` floats, and one result slot. An
// all-reduce moves data through it in slot-sized pieces:
//   1. every rank copies its piece into its slot;            barrier
//   2. rank r sums the r-th 1/size of the piece over the slots in rank order
//      0, 1, …, size−1 into the result slot;                 barrier
//   3. every rank copies the result back.
// The next piece's step 1 may overwrite the slots because every rank has
// passed step 2's barrier, and the result slot is rewritten only after the
// next step-1 barrier, which no rank passes before all have copied it out.
// Two barriers per piece, no locks. Sums in rank order make the result
// identical to what one process adding the same arrays in that order gets.
//
// Rendezvous: rank 0 creates the segment under /dev/shm/<name> (removing a
// stale one left by a crashed run), the others open it when it appears; once
// all are attached rank 0 unlinks the name, so nothing is left behind even
// if the group is killed later. Waiting uses futexes, with a deadline; a rank
// that times out, or sees a peer process gone, marks the group failed so
// every rank returns an error instead of hanging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "inner/collective/collective.h"
#include "inner/collective/launch.h"

namespace geoloco::inner {

struct ShmCollectiveOptions {
  std::size_t slot_floats = std::size_t{1} << 20;  ///< floats per rank and piece (4 MiB), >= 1
  int timeout_ms = 600'000;                        ///< longest wait at a barrier (and for the rendezvous), > 0
};

class ShmCollective final : public Collective {
 public:
  /// Joins group `name` (a shared-memory name without the leading '/', made
  /// of letters, digits, '.', '_', '-') as `rank` of `size`. Every rank must
  /// pass the same size and options. Errors: invalid_argument, io
  /// (shm_open/mmap failed), timeout (a peer did not come), mismatch (the
  /// segment was made for another size).
  static Result<std::unique_ptr<ShmCollective>> create(const std::string& name, int rank, int size,
                                                       ShmCollectiveOptions options = {});
  ~ShmCollective() override;
  ShmCollective(const ShmCollective&) = delete;
  ShmCollective& operator=(const ShmCollective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "shm"; }
  Status allreduce_sum(std::span<float> data) override;
  Status broadcast(std::span<float> data, int root) override;
  Status barrier() override;

 private:
  struct Header;
  ShmCollective(std::string name, int rank, int size, ShmCollectiveOptions options);
  Status attach();
  Status wait_barrier();
  /// Every rank announces (operation, length); all check they agree.
  Status check_same_call(std::uint64_t op, std::size_t n);
  Status fail(Status why);
  float* slot(int r) const;
  float* result() const;

  std::string name_;
  int rank_;
  int size_;
  ShmCollectiveOptions options_;
  int fd_ = -1;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  Header* header_ = nullptr;
  bool unlinked_ = false;
};

/// The collective the launch calls for: SingleCollective for one worker,
/// ShmCollective named after the run id otherwise. Errors: unsupported when
/// the group spans several machines (the CPU collective is one machine's;
/// such sites use NCCL), and those of ShmCollective::create.
Result<std::unique_ptr<Collective>> make_cpu_collective(const LaunchInfo& launch, ShmCollectiveOptions options = {});

}  // namespace geoloco::inner
