#include "inner/collective/shm_collective.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace geoloco::inner {

namespace {

constexpr std::uint64_t kMagic = 0x67656f6c6f636f31ull;  // "geoloco1"
constexpr int kMaxRanks = 1024;
constexpr std::uint64_t kOpAllreduce = 1, kOpBroadcast = 2, kOpBarrier = 3;

using Clock = std::chrono::steady_clock;

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, long nanoseconds) {
  timespec ts{0, nanoseconds};
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
}

std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

}  // namespace

struct ShmCollective::Header {
  std::atomic<std::uint64_t> magic;  // stored last by rank 0: the rest is initialized
  std::uint64_t size;
  std::uint64_t slot_floats;
  std::atomic<std::uint32_t> attached;
  std::atomic<std::uint32_t> failed;
  alignas(64) std::atomic<std::uint32_t> arrived;
  alignas(64) std::atomic<std::uint32_t> generation;
  alignas(64) std::atomic<std::int32_t> pid[kMaxRanks];
  std::atomic<std::uint64_t> call[kMaxRanks];  // (op << 56) | length of each rank's current call
};

float* ShmCollective::slot(int r) const {
  auto* first = reinterpret_cast<float*>(static_cast<char*>(base_) + round_up(sizeof(Header), 4096));
  return first + static_cast<std::size_t>(r) * options_.slot_floats;
}

float* ShmCollective::result() const { return slot(size_); }

ShmCollective::ShmCollective(std::string name, int rank, int size, ShmCollectiveOptions options)
    : name_(std::move(name)), rank_(rank), size_(size), options_(options) {
  bytes_ = round_up(sizeof(Header), 4096) + (static_cast<std::size_t>(size) + 1) * options.slot_floats * sizeof(float);
}

Result<std::unique_ptr<ShmCollective>> ShmCollective::create(const std::string& name, int rank, int size,
                                                             ShmCollectiveOptions options) {
  GEOLOCO_RETURN_IF(size < 1 || size > kMaxRanks, Err::invalid_argument, "shm collective: size ", size, " outside [1, ",
                    kMaxRanks, "]");
  GEOLOCO_RETURN_IF(rank < 0 || rank >= size, Err::invalid_argument, "shm collective: rank ", rank, " is not in [0, ",
                    size, ")");
  GEOLOCO_RETURN_IF(options.slot_floats == 0 || options.slot_floats > (std::size_t{1} << 28), Err::invalid_argument,
                    "shm collective: slot_floats must be in [1, 2^28], got ", options.slot_floats);
  GEOLOCO_RETURN_IF(options.timeout_ms <= 0, Err::invalid_argument, "shm collective: timeout_ms must be > 0");
  GEOLOCO_RETURN_IF(name.empty() || name.size() > 200, Err::invalid_argument,
                    "shm collective: the name must have 1 to 200 characters");
  for (char c : name)
    GEOLOCO_RETURN_IF(!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'),
                      Err::invalid_argument, "shm collective: name '", name,
                      "' may hold only letters, digits, '.', '_' and '-'");
  std::unique_ptr<ShmCollective> c(new ShmCollective("/" + name, rank, size, options));
  GEOLOCO_TRY(c->attach());
  return c;
}

Status ShmCollective::attach() {
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  if (rank_ == 0) {
    ::shm_unlink(name_.c_str());  // a stale segment of a crashed run with the same id
    fd_ = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    GEOLOCO_RETURN_IF(fd_ < 0, Err::io, "shm_open(", name_, ") failed: ", std::strerror(errno));
    GEOLOCO_RETURN_IF(::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0, Err::io, "ftruncate(", name_, ", ", bytes_,
                      ") failed: ", std::strerror(errno));
  } else {
    // Wait for rank 0 to create the segment and give it its full size.
    for (;;) {
      if (fd_ < 0) fd_ = ::shm_open(name_.c_str(), O_RDWR, 0600);
      if (fd_ >= 0) {
        struct stat st {};
        GEOLOCO_RETURN_IF(::fstat(fd_, &st) != 0, Err::io, "fstat(", name_, ") failed: ", std::strerror(errno));
        if (static_cast<std::size_t>(st.st_size) == bytes_) break;
        GEOLOCO_RETURN_IF(st.st_size != 0, Err::mismatch, "shared memory ", name_, " has ", st.st_size,
                          " bytes, expected ", bytes_, " (ranks disagree on size or slot_floats)");
      } else {
        GEOLOCO_RETURN_IF(errno != ENOENT, Err::io, "shm_open(", name_, ") failed: ", std::strerror(errno));
      }
      GEOLOCO_RETURN_IF(Clock::now() > deadline, Err::timeout, "rank ", rank_, ": rank 0 did not create ", name_,
                        " within ", options_.timeout_ms, " ms");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  base_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    return GEOLOCO_ERROR(Err::io, "mmap(", name_, ", ", bytes_, " bytes) failed: ", std::strerror(errno));
  }
  header_ = static_cast<Header*>(base_);
  if (rank_ == 0) {
    // The segment is fresh from ftruncate, so all zero: the atomics start at 0.
    header_->size = static_cast<std::uint64_t>(size_);
    header_->slot_floats = options_.slot_floats;
    header_->pid[0].store(::getpid(), std::memory_order_relaxed);
    header_->magic.store(kMagic, std::memory_order_release);
    while (header_->attached.load(std::memory_order_acquire) != static_cast<std::uint32_t>(size_ - 1)) {
      GEOLOCO_RETURN_IF(Clock::now() > deadline, Err::timeout, "rank 0: only ", header_->attached.load(), " of ",
                        size_ - 1, " peers attached to ", name_, " within ", options_.timeout_ms, " ms");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ::shm_unlink(name_.c_str());  // every rank has it mapped: drop the name
    unlinked_ = true;
  } else {
    while (header_->magic.load(std::memory_order_acquire) != kMagic) {
      GEOLOCO_RETURN_IF(Clock::now() > deadline, Err::timeout, "rank ", rank_, ": ", name_,
                        " was never initialized by rank 0");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    GEOLOCO_RETURN_IF(
        header_->size != static_cast<std::uint64_t>(size_) || header_->slot_floats != options_.slot_floats,
        Err::mismatch, "rank ", rank_, ": ", name_, " was made for ", header_->size, " ranks and ",
        header_->slot_floats, " floats per slot, this rank expects ", size_, " and ", options_.slot_floats);
    header_->pid[rank_].store(::getpid(), std::memory_order_relaxed);
    header_->attached.fetch_add(1, std::memory_order_acq_rel);
  }
  return wait_barrier();
}

ShmCollective::~ShmCollective() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  if (rank_ == 0 && !unlinked_ && fd_ >= 0) ::shm_unlink(name_.c_str());
}

Status ShmCollective::fail(Status why) {
  header_->failed.store(1, std::memory_order_release);
  futex_wake_all(&header_->generation);
  return why;
}

Status ShmCollective::wait_barrier() {
  GEOLOCO_RETURN_IF(header_->failed.load(std::memory_order_acquire) != 0, Err::io,
                    "shm collective: the group failed earlier (another rank timed out or exited)");
  const std::uint32_t gen = header_->generation.load(std::memory_order_acquire);
  if (header_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(size_)) {
    // Last to arrive: reset the count BEFORE releasing the others, who may
    // enter the next barrier as soon as they see the new generation.
    header_->arrived.store(0, std::memory_order_relaxed);
    header_->generation.store(gen + 1, std::memory_order_release);
    futex_wake_all(&header_->generation);
    return {};
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  int spins = 0;
  while (header_->generation.load(std::memory_order_acquire) == gen) {
    if (header_->failed.load(std::memory_order_acquire) != 0)
      return GEOLOCO_ERROR(Err::io, "shm collective: rank ", rank_,
                           ": the group failed (another rank timed out or exited)");
    if (++spins < 64) continue;                         // a short spin: peers usually arrive within microseconds
    futex_wait(&header_->generation, gen, 50'000'000);  // 50 ms, then look at the clock and the peers
    // Released meanwhile: every peer arrived, and one may have exited since
    // (after the last barrier of its run), which is no failure.
    if (header_->generation.load(std::memory_order_acquire) != gen) break;
    if (Clock::now() > deadline)
      return fail(GEOLOCO_ERROR(Err::timeout, "shm collective: rank ", rank_, " waited ", options_.timeout_ms,
                                " ms at a barrier"));
    if (spins % 16 == 0) {
      for (int r = 0; r < size_; ++r) {
        const int pid = header_->pid[r].load(std::memory_order_relaxed);
        if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)
          return fail(GEOLOCO_ERROR(Err::io, "shm collective: rank ", r, " (pid ", pid, ") has exited"));
      }
    }
  }
  return {};
}

Status ShmCollective::barrier() { return check_same_call(kOpBarrier, 0); }

Status ShmCollective::check_same_call(std::uint64_t op, std::size_t n) {
  const std::uint64_t mine = (op << 56) | n;
  header_->call[rank_].store(mine, std::memory_order_relaxed);
  GEOLOCO_TRY(wait_barrier());
  for (int r = 0; r < size_; ++r) {
    const std::uint64_t theirs = header_->call[r].load(std::memory_order_relaxed);
    if (theirs != mine)
      return fail(GEOLOCO_ERROR(Err::invalid_argument, "shm collective: rank ", rank_, " called op ", op, " on ", n,
                                " floats but rank ", r, " called op ", theirs >> 56, " on ",
                                theirs & ((std::uint64_t{1} << 56) - 1)));
  }
  // A second barrier: no rank may overwrite its call word (next operation)
  // while a slower one is still comparing.
  return wait_barrier();
}

Status ShmCollective::allreduce_sum(std::span<float> data) {
  GEOLOCO_TRY(check_same_call(kOpAllreduce, data.size()));
  if (size_ == 1) return {};
  const std::size_t piece = options_.slot_floats;
  for (std::size_t offset = 0; offset < data.size(); offset += piece) {
    const std::size_t len = std::min(piece, data.size() - offset);
    std::memcpy(slot(rank_), data.data() + offset, len * sizeof(float));
    GEOLOCO_TRY(wait_barrier());
    const std::size_t begin = len * static_cast<std::size_t>(rank_) / static_cast<std::size_t>(size_);
    const std::size_t end = len * static_cast<std::size_t>(rank_ + 1) / static_cast<std::size_t>(size_);
    float* out = result();
    for (std::size_t j = begin; j < end; ++j) {
      float acc = slot(0)[j];
      for (int r = 1; r < size_; ++r) acc += slot(r)[j];  // rank order: the same bits on every run
      out[j] = acc;
    }
    GEOLOCO_TRY(wait_barrier());
    std::memcpy(data.data() + offset, out, len * sizeof(float));
  }
  return {};
}

Status ShmCollective::broadcast(std::span<float> data, int root) {
  GEOLOCO_RETURN_IF(root < 0 || root >= size_, Err::invalid_argument, "broadcast: root ", root, " is not in [0, ",
                    size_, ")");
  GEOLOCO_TRY(check_same_call(kOpBroadcast | (static_cast<std::uint64_t>(root) << 4), data.size()));
  if (size_ == 1) return {};
  const std::size_t piece = options_.slot_floats;
  for (std::size_t offset = 0; offset < data.size(); offset += piece) {
    const std::size_t len = std::min(piece, data.size() - offset);
    if (rank_ == root) std::memcpy(result(), data.data() + offset, len * sizeof(float));
    GEOLOCO_TRY(wait_barrier());
    if (rank_ != root) std::memcpy(data.data() + offset, result(), len * sizeof(float));
    GEOLOCO_TRY(wait_barrier());
  }
  return {};
}

Result<std::unique_ptr<Collective>> make_cpu_collective(const LaunchInfo& launch, ShmCollectiveOptions options) {
  if (launch.size == 1) return std::unique_ptr<Collective>(new SingleCollective());
  GEOLOCO_RETURN_IF(launch.local_size != launch.size, Err::unsupported,
                    "the CPU collective joins processes on one machine, but the launcher (", launch.launcher,
                    ") reports ", launch.local_size, " of ", launch.size,
                    " processes on this node; multi-node sites need the NCCL collective");
  std::string name = "geoloco-";
  for (char c : launch.run_id)
    name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  auto c = ShmCollective::create(name, launch.rank, launch.size, options);
  if (!c.ok()) return c.status();
  return std::unique_ptr<Collective>(std::move(*c));
}

}  // namespace geoloco::inner
