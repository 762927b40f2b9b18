#include "common/buffer.h"

#include <malloc.h>

namespace geoloco {

void keep_freed_memory_for_reuse() {
  // Blocks up to 64 MiB come from the heap, and up to 256 MiB of free heap is
  // kept: a few dozen 4 MiB chunks in flight per peer fit comfortably.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void return_freed_memory() { malloc_trim(0); }

}  // namespace geoloco
