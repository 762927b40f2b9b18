#include "inner/cuda/emulator/state.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

struct CUstream_st {
  int device = 0;
};

namespace geoloco::cuda_emulator {

namespace {

constexpr std::size_t kAlignment = 256;  // cudaMalloc's guarantee

thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
std::atomic<cudaError_t> g_sticky{cudaSuccess};

struct Registry {
  std::mutex mutex;
  struct Allocation {
    std::size_t bytes;
    int device;
  };
  std::map<std::uintptr_t, Allocation> allocations;  // by start
  std::set<cudaStream_t> streams;
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void report(const std::string& detail) { std::fprintf(stderr, "geoloco CUDA emulator: %s\n", detail.c_str()); }

int device_count() {
  static const int count = [] {
    // Installed: GEOLOCO_CUDA_EMULATOR_DEVICES; without it, 1, or all 8
    // when CUDA_VISIBLE_DEVICES names devices (the emulated machine has the
    // ones a launcher hands out: geolocod sets it to the site's gpus, and
    // drops GEOLOCO_* variables from the trainer's environment).
    const char* env = std::getenv("GEOLOCO_CUDA_EMULATOR_DEVICES");
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const int n = env != nullptr ? std::atoi(env) : visible != nullptr ? 8 : 1;
    const int installed = n >= 1 && n <= 8 ? n : 1;
    // CUDA_VISIBLE_DEVICES as the CUDA runtime reads it: the listed ordinals,
    // up to the first that is not an installed device.
    if (visible == nullptr) return installed;
    int shown = 0;
    for (const char* p = visible;; ++p) {
      char* end = nullptr;
      const long id = std::strtol(p, &end, 10);
      if (end == p || id < 0 || id >= installed) break;
      ++shown;
      if (*end != ',') break;
      p = end;
    }
    return shown;
  }();
  return count;
}

cudaError_t fail(cudaError_t code, const std::string& detail) {
  report(detail);
  t_last = code;
  return code;
}

cudaError_t fault(cudaError_t code, const std::string& detail) {
  report(detail + " (sticky: every later call fails)");
  cudaError_t expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, code);
  t_last = code;
  return code;
}

cudaError_t sticky_error() { return g_sticky.load(); }

cudaError_t last_error(bool clear) {
  const cudaError_t sticky = g_sticky.load();
  if (sticky != cudaSuccess) return sticky;
  const cudaError_t e = t_last;
  if (clear) t_last = cudaSuccess;
  return e;
}

void* allocate(std::size_t bytes) {
  // Exactly `bytes` (cudaMalloc rounds up, and the tail would pass unseen):
  // in the sanitizer build a read or write one past the end is reported.
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, bytes == 0 ? 1 : bytes) != 0) return nullptr;
  std::memset(p, 0xff, bytes);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.allocations[reinterpret_cast<std::uintptr_t>(p)] = Registry::Allocation{bytes, t_device};
  return p;
}

bool release(void* p) {
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    auto it = r.allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == r.allocations.end()) return false;
    r.allocations.erase(it);
  }
  std::free(p);
  return true;
}

bool is_device(const void* p, std::size_t bytes) {
  const auto c = reinterpret_cast<std::uintptr_t>(p);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.allocations.upper_bound(c);  // first allocation starting after c
  if (it == r.allocations.begin()) return false;
  --it;
  const std::size_t offset = c - it->first;
  return offset <= it->second.bytes && bytes <= it->second.bytes - offset;
}

int device_of(const void* p) {
  const auto c = reinterpret_cast<std::uintptr_t>(p);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.allocations.upper_bound(c);
  if (it == r.allocations.begin()) return -1;
  --it;
  return c - it->first < it->second.bytes ? it->second.device : -1;
}

cudaStream_t create_stream() {
  auto* s = new CUstream_st{t_device};
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.streams.insert(s);
  return s;
}

bool destroy_stream(cudaStream_t stream) {
  Registry& r = registry();
  {
    std::lock_guard lock(r.mutex);
    if (r.streams.erase(stream) == 0) return false;
  }
  delete stream;
  return true;
}

bool is_stream(cudaStream_t stream) {
  if (stream == nullptr) return true;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.streams.count(stream) == 1;
}

int current_device() { return t_device; }
void set_current_device(int device) { t_device = device; }

}  // namespace geoloco::cuda_emulator
