// GEOLOCO_LAUNCH(kernel, grid, block, stream, args...): how every kernel of
// inner/cuda/ is launched (no dynamic shared memory; none of them uses it).
//
// Under nvcc it is `kernel<<<grid, block, 0, stream>>>(args...)`. Compiled by
// the host compiler against the CUDA emulator (GEOLOCO_CUDA_EMULATOR,
// inner/cuda/emulator/), it runs the kernel on the CPU, one fiber per thread,
// after checking the configuration and that every pointer argument is device
// memory, so CI executes the same kernels that a GPU would.
#pragma once

#if defined(GEOLOCO_CUDA_EMULATOR)
#define GEOLOCO_LAUNCH(kernel, grid, block, stream, ...) \
  ::geoloco::cuda_emulator::launch(                      \
      #kernel, (grid), (block), (stream), [](auto&... a) { kernel(a...); }, __VA_ARGS__)
#else
#define GEOLOCO_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif
