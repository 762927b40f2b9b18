// The CUDA emulator's process state, shared by its runtime, kernel launcher,
// cuBLAS and NCCL: the error state (per-thread last error, process-wide
// sticky fault), the device allocations, and the live streams.
#pragma once

#include <cstddef>
#include <mutex>
#include <set>
#include <string>

#include "cuda_runtime_api.h"

namespace geoloco::cuda_emulator {

/// How many devices the emulator shows: GEOLOCO_CUDA_EMULATOR_DEVICES (1 to
/// 8) are installed (default 1, or 8 when CUDA_VISIBLE_DEVICES is set), of
/// which CUDA_VISIBLE_DEVICES, when set, shows the listed ones (as the CUDA
/// runtime; 0 when the list names none).
/// They share the host's memory; what they allow is one worker process per
/// "device", as NCCL requires, to run multi-rank groups.
int device_count();

/// Prints `detail` to stderr as the emulator's diagnostic.
void report(const std::string& detail);

/// Records a failed call as this thread's last error (cudaGetLastError),
/// prints `detail` to stderr, and returns `code`.
cudaError_t fail(cudaError_t code, const std::string& detail);
/// The same for a fault that breaks the context, as an illegal address does
/// on a GPU: every later call answers `code` (sticky).
cudaError_t fault(cudaError_t code, const std::string& detail);
/// The sticky fault, or cudaSuccess.
cudaError_t sticky_error();
/// cudaGetLastError / cudaPeekAtLastError.
cudaError_t last_error(bool clear);

/// A new device allocation of `bytes` (its bytes 0xff: NaN as floats, so
/// reading memory nobody wrote shows), or nullptr when out of memory.
void* allocate(std::size_t bytes);
/// Frees a device allocation; false when `p` is not the start of one.
bool release(void* p);
/// Whether [p, p + bytes) lies in one device allocation (bytes may be 0).
bool is_device(const void* p, std::size_t bytes);
/// The device whose allocation holds the byte at `p`, or -1.
int device_of(const void* p);

/// Streams: nullptr is the legacy default stream and always valid.
cudaStream_t create_stream();
bool destroy_stream(cudaStream_t stream);
bool is_stream(cudaStream_t stream);

int current_device();
void set_current_device(int device);

/// The live objects behind one library's opaque handles (cuBLAS handles,
/// NCCL communicators): a handle is usable only while it is in the set.
template <class T>
class LiveSet {
 public:
  T* add(T* object) {
    std::lock_guard lock(mutex_);
    objects_.insert(object);
    return object;
  }
  bool contains(const T* object) {
    std::lock_guard lock(mutex_);
    return objects_.count(const_cast<T*>(object)) == 1;
  }
  /// Removes and deletes `object`; false when it was not live.
  bool destroy(T* object) {
    {
      std::lock_guard lock(mutex_);
      if (objects_.erase(object) == 0) return false;
    }
    delete object;
    return true;
  }

 private:
  std::mutex mutex_;
  std::set<T*> objects_;
};

}  // namespace geoloco::cuda_emulator
