// Byte buffers that are not zeroed when they grow: frame payloads and encoded
// chunks are overwritten right away, and zeroing 4 MiB per frame (plus the
// page faults it triggers) showed up as a tenth of the all-reduce's time.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace geoloco {

/// An allocator whose value-initialization is default-initialization.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// Bytes whose resize() leaves new elements uninitialized.
using Buffer = std::vector<std::byte, DefaultInitAllocator<std::byte>>;

/// Recycles chunk-sized buffers: a buffer given back is handed out again
/// instead of being freed and faulted in anew. Thread-safe (a mesh's
/// connections acquire on their threads, its operations release on theirs).
class BufferPool {
 public:
  explicit BufferPool(std::size_t max_kept = 64) : max_kept_(max_kept) {}
  /// A buffer of `size` bytes (contents unspecified).
  Buffer acquire(std::size_t size) {
    Buffer b;
    {
      std::lock_guard lock(mutex_);
      for (std::size_t i = kept_.size(); i-- > 0;) {
        if (kept_[i].capacity() >= size) {
          b = std::move(kept_[i]);
          kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
    b.resize(size);
    return b;
  }
  /// Takes a buffer back; beyond `max_kept` buffers it is freed.
  void release(Buffer&& b) {
    if (b.capacity() == 0) return;
    Buffer freed;  // freed outside the lock
    std::lock_guard lock(mutex_);
    if (kept_.size() < max_kept_) kept_.push_back(std::move(b));
    else freed = std::move(b);
  }
  std::size_t kept() const {
    std::lock_guard lock(mutex_);
    return kept_.size();
  }

 private:
  std::size_t max_kept_;
  mutable std::mutex mutex_;
  std::vector<Buffer> kept_;
};

/// Keeps large freed blocks in the process instead of returning them to the
/// kernel, so that chunk-sized buffers are reused rather than faulted in
/// again. Programs call it once at start; libraries never do.
void keep_freed_memory_for_reuse();

/// Hands the free memory of every malloc arena back to the kernel. A round
/// frees a model-sized Δ in chunks smaller than the mapping threshold, on
/// several threads' arenas; without this they stay resident between rounds
/// and add to the next round's peak.
void return_freed_memory();

}  // namespace geoloco
