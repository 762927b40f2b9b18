#include "inner/cuda/nccl_collective.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

namespace geoloco::inner::cuda {

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[8] = {'G', 'L', 'N', 'C', 'C', 'L', '1', '\0'};

struct IdFile {
  char magic[8];
  std::int32_t size;
  ncclUniqueId id;
};

std::string id_path(const NcclOptions& options, const std::string& run_id) {
  std::string dir = options.id_dir;
  if (dir.empty()) {
    const char* env = std::getenv("GEOLOCO_NCCL_ID_DIR");
    dir = env != nullptr && *env != '\0' ? env : "/dev/shm";
  }
  std::string name = "geoloco-nccl-";
  for (char c : run_id) {
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    name += plain ? c : '_';  // a run id is not trusted to be a file name
  }
  return dir + "/" + name + ".id";
}

Status publish(const std::string& path, const IdFile& content) {
  const std::string tmp = cat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&content), sizeof(content));
    out.flush();
    GEOLOCO_RETURN_IF(!out, Err::io, "nccl: cannot write the unique id to ", tmp, ": ", std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);  // atomic: readers see no file or the whole file
  GEOLOCO_RETURN_IF(ec, Err::io, "nccl: cannot publish the unique id as ", path, ": ", ec.message());
  return {};
}

Result<ncclUniqueId> await_id(const std::string& path, int size, Clock::time_point deadline) {
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    IdFile content{};
    if (in && in.read(reinterpret_cast<char*>(&content), sizeof(content))) {
      GEOLOCO_RETURN_IF(std::memcmp(content.magic, kMagic, sizeof(kMagic)) != 0, Err::malformed, "nccl: ", path,
                        " is not a geoloco NCCL id file");
      GEOLOCO_RETURN_IF(content.size != size, Err::mismatch, "nccl: ", path, " was written for a group of ",
                        content.size, ", this rank belongs to a group of ", size);
      return content.id;
    }
    GEOLOCO_RETURN_IF(Clock::now() > deadline, Err::timeout, "nccl: rank 0 did not publish ", path, " in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int local_device(const LaunchInfo& launch, int device_count) {
  return device_count > 0 ? launch.local_rank % device_count : 0;
}

Result<std::unique_ptr<NcclCollective>> NcclCollective::create(const LaunchInfo& launch, Context& ctx,
                                                               NcclOptions options) {
  GEOLOCO_RETURN_IF(options.timeout_ms <= 0, Err::invalid_argument, "nccl: timeout_ms must be > 0");
  GEOLOCO_RETURN_IF(launch.size < 1 || launch.rank < 0 || launch.rank >= launch.size, Err::invalid_argument,
                    "nccl: rank ", launch.rank, " is not in a group of ", launch.size);
  GEOLOCO_RETURN_IF(launch.size > 1 && launch.run_id.empty(), Err::invalid_argument, "nccl: a group of ", launch.size,
                    " needs a run id to meet under");
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  std::unique_ptr<NcclCollective> c(new NcclCollective(ctx, launch.rank, launch.size, options));
  GEOLOCO_TRY(c->token_.allocate(1));
  GEOLOCO_TRY(c->token_.zero(ctx.stream()));

  const std::string path = id_path(options, launch.run_id);
  ncclUniqueId id{};
  if (launch.rank == 0) {
    GEOLOCO_NCCL_CHECK(ncclGetUniqueId(&id));
    if (launch.size > 1) {
      IdFile content{};
      std::memcpy(content.magic, kMagic, sizeof(kMagic));
      content.size = launch.size;
      content.id = id;
      GEOLOCO_TRY(publish(path, content));
    }
  } else {
    auto got = await_id(path, launch.size, deadline);
    if (!got.ok()) return got.status();
    id = *got;
  }

  GEOLOCO_CUDA_CHECK(cudaSetDevice(ctx.device()));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that every wait below can give up at the deadline
  // Non-blocking: the call may answer ncclInProgress while ranks connect.
  const ncclResult_t init = ncclCommInitRankConfig(&c->comm_, launch.size, id, launch.rank, &config);
  Status formed = init == ncclSuccess || init == ncclInProgress
                      ? c->wait_comm()
                      : nccl_status(init, "ncclCommInitRankConfig", __FILE__, __LINE__);
  if (!formed.ok()) c->failed_ = formed;  // the destructor aborts a group that never formed
  if (launch.rank == 0 && launch.size > 1) {
    std::error_code ec;
    std::filesystem::remove(path, ec);  // every rank has read it: the group exists, or has failed
  }
  GEOLOCO_TRY(formed);
  return c;
}

NcclCollective::~NcclCollective() {
  if (comm_ == nullptr) return;
  // Nothing to report to at teardown; a group that failed is aborted, not finalized.
  const auto finalized = [this] {
    const ncclResult_t r = ncclCommFinalize(comm_);
    return (r == ncclSuccess || r == ncclInProgress) && wait_comm().ok();
  };
  if (failed_.ok() && finalized()) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
}

Status NcclCollective::wait_comm() {
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    GEOLOCO_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state == ncclSuccess) return {};
    GEOLOCO_RETURN_IF(state != ncclInProgress, Err::io, "nccl: the communicator failed: ", ncclGetErrorString(state));
    GEOLOCO_RETURN_IF(Clock::now() > deadline, Err::timeout, "nccl: a peer did not arrive within ", options_.timeout_ms,
                      " ms");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status NcclCollective::finish(Status launched) {
  Status s = launched;
  if (s.ok()) s = wait_comm();  // the call itself may still be in progress (non-blocking communicator)
  if (s.ok()) {
    // Then the queued work: poll the stream, and the communicator for a peer's failure.
    const auto deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(ctx_.stream());
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        s = cuda_status(q, "cudaStreamQuery (after a collective)", __FILE__, __LINE__);
        break;
      }
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        s = GEOLOCO_ERROR(Err::io, "nccl: the communicator failed: ", ncclGetErrorString(state));
        break;
      }
      if (Clock::now() > deadline) {
        s = GEOLOCO_ERROR(Err::timeout, "nccl: a collective did not complete within ", options_.timeout_ms,
                          " ms (a peer is gone or stalled)");
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  if (!s.ok()) {
    failed_ = s;
    ncclCommAbort(comm_);  // unblocks the kernels of this rank; the group is over
    comm_ = nullptr;
  }
  return s;
}

namespace {
Status launched(ncclResult_t r, const char* call) {
  if (r == ncclSuccess || r == ncclInProgress) return {};
  return nccl_status(r, call, __FILE__, __LINE__);
}
}  // namespace

Status NcclCollective::run(std::span<float> data, const char* call,
                           const std::function<ncclResult_t(float*)>& enqueue) {
  if (!failed_.ok()) return GEOLOCO_ERROR(failed_.code(), "nccl: the group failed earlier: ", failed_.message());
  if (data.empty()) return {};  // every rank holds the same (zero) size: nothing to exchange
  cudaPointerAttributes where{};
  GEOLOCO_CUDA_CHECK(cudaPointerGetAttributes(&where, data.data()));  // host memory answers Unregistered or Host
  if (where.type == cudaMemoryTypeDevice) return finish(launched(enqueue(data.data()), call));
  if (stage_.size() < data.size()) GEOLOCO_TRY(stage_.allocate(data.size()));
  GEOLOCO_CUDA_CHECK(
      cudaMemcpyAsync(stage_.data(), data.data(), data.size_bytes(), cudaMemcpyHostToDevice, ctx_.stream()));
  GEOLOCO_TRY(finish(launched(enqueue(stage_.data()), call)));
  GEOLOCO_CUDA_CHECK(
      cudaMemcpyAsync(data.data(), stage_.data(), data.size_bytes(), cudaMemcpyDeviceToHost, ctx_.stream()));
  GEOLOCO_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  return {};
}

Status NcclCollective::allreduce(std::span<float> data, ncclRedOp_t op) {
  return run(data, "ncclAllReduce",
             [&](float* d) { return ncclAllReduce(d, d, data.size(), ncclFloat, op, comm_, ctx_.stream()); });
}

Status NcclCollective::allreduce_sum(std::span<float> data) { return allreduce(data, ncclSum); }

Status NcclCollective::allreduce_average(std::span<float> data) { return allreduce(data, ncclAvg); }

Status NcclCollective::broadcast(std::span<float> data, int root) {
  GEOLOCO_RETURN_IF(root < 0 || root >= size_, Err::invalid_argument, "broadcast: root ", root,
                    " is not a rank of a group of ", size_);
  return run(data, "ncclBroadcast",
             [&](float* d) { return ncclBroadcast(d, d, data.size(), ncclFloat, root, comm_, ctx_.stream()); });
}

Status NcclCollective::barrier() { return allreduce(std::span<float>(token_.data(), 1), ncclSum); }

}  // namespace geoloco::inner::cuda
