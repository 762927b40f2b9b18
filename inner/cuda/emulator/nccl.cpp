// NCCL of the CUDA emulator (include/nccl.h). A communicator of one rank
// copies. A group of several ranks (one process per emulated device, as NCCL
// requires) meets in a POSIX shared-memory segment named after the unique
// id: each collective goes through it in chunks, every rank reducing the
// ranks' chunks in rank order, so every rank gets the same bits. Before each
// collective: NCCL's checks (a live communicator, device buffers of the full
// size, a known type and operation, a root in range).
//
// A rank that never arrives: a wait gives up after
// GEOLOCO_CUDA_EMULATOR_NCCL_TIMEOUT_MS (default 60000), ends the group for
// every rank, and the communicator reports ncclRemoteError through
// ncclCommGetAsyncError, as NCCL does when a peer is gone. ncclCommAbort
// tells the other ranks at once. (Collectives complete inside the call
// here, so this limit, not NcclCollective's timeout_ms, bounds a wait.)
//
// ncclAvg multiplies each rank's value by 1/nranks before the sum, as NCCL
// does for floating types (its PreMulSum); every rank sums in rank order.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "common/status.h"
#include "inner/cuda/emulator/state.h"
#include "nccl.h"

namespace emu = geoloco::cuda_emulator;
using geoloco::cat;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kSlotBytes = std::size_t{1} << 20;  // per rank and chunk

/// The head of a group's shared segment; nranks slots of kSlotBytes follow.
struct Shared {
  std::atomic<std::uint32_t> waiting;     // ranks in the current barrier
  std::atomic<std::uint32_t> generation;  // barriers completed
  std::atomic<std::uint32_t> aborted;     // a rank aborted: the group is over
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "the segment's counters are shared across processes");
constexpr std::size_t kHeadBytes = 64;
static_assert(sizeof(Shared) <= kHeadBytes);

std::chrono::milliseconds wait_limit() {
  const char* env = std::getenv("GEOLOCO_CUDA_EMULATOR_NCCL_TIMEOUT_MS");
  const long ms = env != nullptr ? std::atol(env) : 0;
  return std::chrono::milliseconds(ms > 0 ? ms : 60000);
}

}  // namespace

struct ncclComm {
  int nranks = 1;
  int rank = 0;
  int pending_polls = 0;  // a non-blocking communicator answers ncclInProgress this many times
  ncclResult_t failure = ncclSuccess;
  Shared* shared = nullptr;
  std::size_t mapped = 0;

  char* slot(int r) const {
    return reinterpret_cast<char*>(shared) + kHeadBytes + static_cast<std::size_t>(r) * kSlotBytes;
  }

  /// Every rank arrives, or the group has failed (a rank aborted or did not come).
  bool barrier() {
    if (failure != ncclSuccess) return false;
    const std::uint32_t gen = shared->generation.load();
    if (shared->waiting.fetch_add(1) + 1 == static_cast<std::uint32_t>(nranks)) {
      shared->waiting.store(0);
      shared->generation.fetch_add(1);
      return true;
    }
    const auto deadline = Clock::now() + wait_limit();
    for (unsigned spins = 0; shared->generation.load() == gen; ++spins) {
      if (shared->aborted.load() != 0 || Clock::now() > deadline) {
        // The count this rank added stays: the group is over for everyone.
        const bool aborted = shared->aborted.exchange(1) != 0;
        failure = ncclRemoteError;
        emu::report(cat("NCCL rank ", rank, " of ", nranks, ": ",
                        aborted ? "another rank left the group" : "a rank did not arrive in time"));
        return false;
      }
      // Yield at first (ranks usually arrive together), then sleep: a late
      // rank must not cost a waiting one a core.
      if (spins < 1000) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    return true;
  }

  ~ncclComm() {
    if (shared != nullptr) munmap(shared, mapped);
  }
};

namespace {

emu::LiveSet<ncclComm>& comms() {
  static emu::LiveSet<ncclComm> c;
  return c;
}

bool live(ncclComm_t comm) { return comms().contains(comm); }

ncclResult_t refuse(ncclResult_t result, const std::string& why) {
  emu::report(why);
  return result;
}

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

std::string segment_name(const ncclUniqueId& id) {
  static const char* hex = "0123456789abcdef";
  std::string name = "/geoloco-emulated-nccl-";
  for (int i = 0; i < 16; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  return name;
}

/// Maps the group's segment: rank 0 makes it, the others wait for it.
ncclResult_t join(ncclComm& c, const ncclUniqueId& id) {
  const std::string name = segment_name(id);
  c.mapped = kHeadBytes + static_cast<std::size_t>(c.nranks) * kSlotBytes;
  const auto deadline = Clock::now() + wait_limit();
  int fd = -1;
  for (;;) {
    fd = c.rank == 0 ? shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600) : shm_open(name.c_str(), O_RDWR, 0);
    if (fd >= 0 && c.rank == 0 && ftruncate(fd, static_cast<off_t>(c.mapped)) != 0) {
      close(fd);
      shm_unlink(name.c_str());
      return refuse(ncclSystemError, cat("ncclCommInitRankConfig: cannot size ", name, ": ", std::strerror(errno)));
    }
    struct stat st {};
    if (fd >= 0 && fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == c.mapped) break;
    if (fd >= 0) close(fd);
    if (c.rank == 0) return refuse(ncclSystemError, cat("ncclCommInitRankConfig: cannot make ", name));
    if (Clock::now() > deadline)
      return refuse(ncclRemoteError, cat("ncclCommInitRankConfig: rank 0 did not make ", name, " in time"));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void* p = mmap(nullptr, c.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return refuse(ncclSystemError, cat("ncclCommInitRankConfig: cannot map ", name));
  c.shared = static_cast<Shared*>(p);  // zero-filled by ftruncate: counters at 0
  const bool met = c.barrier();
  if (c.rank == 0) shm_unlink(name.c_str());  // every rank has it mapped (or the group failed)
  return met ? ncclSuccess : refuse(ncclRemoteError, "ncclCommInitRankConfig: the group did not form");
}

/// NCCL's checks before a collective; ncclSuccess when it may run.
ncclResult_t check(const char* what, const void* send, const void* recv, std::size_t bytes, ncclComm_t comm,
                   cudaStream_t stream) {
  if (!live(comm)) return refuse(ncclInvalidArgument, cat(what, ": not a live communicator"));
  if (!emu::is_stream(stream)) return refuse(ncclInvalidArgument, cat(what, ": not a live stream"));
  if (emu::sticky_error() != cudaSuccess) return ncclUnhandledCudaError;
  // A null `send` is allowed only where nothing is read from it (a broadcast's non-root ranks).
  if (bytes > 0 && ((send != nullptr && !emu::is_device(send, bytes)) || !emu::is_device(recv, bytes)))
    return refuse(ncclInvalidArgument,
                  cat(what, ": the buffers (", send, ", ", recv, ") must be ", bytes, " bytes of device memory each"));
  return ncclSuccess;
}

/// Sums (or maxes, …) the ranks' chunks in rank order into `out`.
void reduce_chunk(const ncclComm& c, float* out, std::size_t n, ncclRedOp_t op) {
  const auto* first = reinterpret_cast<const float*>(c.slot(0));
  const float scale = 1.0f / static_cast<float>(c.nranks);
  if (op == ncclAvg) {
    for (std::size_t i = 0; i < n; ++i) out[i] = first[i] * scale;
  } else {
    std::copy(first, first + n, out);
  }
  for (int r = 1; r < c.nranks; ++r) {
    const auto* in = reinterpret_cast<const float*>(c.slot(r));
    for (std::size_t i = 0; i < n; ++i) {
      switch (op) {
        case ncclSum:
          out[i] += in[i];
          break;
        case ncclAvg:
          out[i] += in[i] * scale;
          break;
        case ncclProd:
          out[i] *= in[i];
          break;
        case ncclMax:
          out[i] = std::max(out[i], in[i]);
          break;
        case ncclMin:
          out[i] = std::min(out[i], in[i]);
          break;
      }
    }
  }
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return ncclInvalidArgument;
  std::random_device random;
  for (char& c : uniqueId->internal) c = static_cast<char>(random());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return refuse(ncclInvalidArgument, cat("ncclCommInitRankConfig: rank ", rank, " of ", nranks));
  if (config != nullptr && config->size != sizeof(ncclConfig_t))
    return refuse(ncclInvalidArgument, "ncclCommInitRankConfig: config not made by NCCL_CONFIG_INITIALIZER");
  if (emu::sticky_error() != cudaSuccess) return ncclUnhandledCudaError;
  const bool blocking = config == nullptr || config->blocking != 0;
  auto* c = new ncclComm;
  c->nranks = nranks;
  c->rank = rank;
  c->pending_polls = blocking ? 0 : 1;
  if (nranks > 1) {
    if (const ncclResult_t r = join(*c, commId); r != ncclSuccess) {
      delete c;
      return r;
    }
  }
  *comm = comms().add(c);
  return blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!live(comm) || asyncError == nullptr) return ncclInvalidArgument;
  if (comm->pending_polls > 0) {
    --comm->pending_polls;
    *asyncError = ncclInProgress;
  } else if (comm->failure != ncclSuccess) {
    *asyncError = comm->failure;
  } else {
    *asyncError = emu::sticky_error() == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!live(comm)) return ncclInvalidArgument;
  if (comm->nranks > 1) comm->barrier();  // every rank's last collective is done
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying nothing
  return comms().destroy(comm) ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // NCCL accepts aborting nothing
  if (!live(comm)) return ncclInvalidArgument;
  if (comm->shared != nullptr) comm->shared->aborted.store(1);
  comms().destroy(comm);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op < ncclSum || op > ncclAvg) return refuse(ncclInvalidArgument, "ncclAllReduce: unknown operation");
  const std::size_t size = type_size(datatype);
  if (size == 0) return refuse(ncclInvalidArgument, "ncclAllReduce: unknown data type");
  const std::size_t bytes = count * size;
  if (bytes > 0 && sendbuff == nullptr) return refuse(ncclInvalidArgument, "ncclAllReduce: null send buffer");
  if (const ncclResult_t r = check("ncclAllReduce", sendbuff, recvbuff, bytes, comm, stream); r != ncclSuccess)
    return r;
  if (comm->nranks == 1) {
    if (sendbuff != recvbuff && bytes > 0) std::memmove(recvbuff, sendbuff, bytes);
    return ncclSuccess;
  }
  if (datatype != ncclFloat32)
    return refuse(ncclInvalidArgument, "ncclAllReduce: the emulator reduces float32 across ranks only");
  // Like NCCL's kernels, a failure of the group shows through ncclCommGetAsyncError, not here.
  const auto* in = static_cast<const char*>(sendbuff);
  auto* out = static_cast<char*>(recvbuff);
  for (std::size_t off = 0; off < bytes; off += kSlotBytes) {
    const std::size_t n = std::min(kSlotBytes, bytes - off);
    std::memcpy(comm->slot(comm->rank), in + off, n);
    if (!comm->barrier()) return ncclSuccess;
    reduce_chunk(*comm, reinterpret_cast<float*>(out + off), n / sizeof(float), op);
    if (!comm->barrier()) return ncclSuccess;  // the slots are read before the next chunk overwrites them
  }
  return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const std::size_t size = type_size(datatype);
  if (size == 0) return refuse(ncclInvalidArgument, "ncclBroadcast: unknown data type");
  if (!live(comm)) return refuse(ncclInvalidArgument, "ncclBroadcast: not a live communicator");
  if (root < 0 || root >= comm->nranks)
    return refuse(ncclInvalidArgument, cat("ncclBroadcast: root ", root, " in a group of ", comm->nranks));
  const std::size_t bytes = count * size;
  // Only the root's send buffer is read.
  const void* send = comm->rank == root ? sendbuff : nullptr;
  if (bytes > 0 && comm->rank == root && sendbuff == nullptr)
    return refuse(ncclInvalidArgument, "ncclBroadcast: null send buffer on the root");
  if (const ncclResult_t r = check("ncclBroadcast", send, recvbuff, bytes, comm, stream); r != ncclSuccess) return r;
  if (comm->nranks == 1) {
    if (sendbuff != recvbuff && bytes > 0) std::memmove(recvbuff, sendbuff, bytes);
    return ncclSuccess;
  }
  const auto* in = static_cast<const char*>(sendbuff);
  auto* out = static_cast<char*>(recvbuff);
  for (std::size_t off = 0; off < bytes; off += kSlotBytes) {
    const std::size_t n = std::min(kSlotBytes, bytes - off);
    if (comm->rank == root) std::memcpy(comm->slot(0), in + off, n);
    if (!comm->barrier()) return ncclSuccess;
    if (comm->rank != root) {
      std::memcpy(out + off, comm->slot(0), n);
    } else if (in != out) {
      std::memmove(out + off, in + off, n);
    }
    if (!comm->barrier()) return ncclSuccess;
  }
  return ncclSuccess;
}
