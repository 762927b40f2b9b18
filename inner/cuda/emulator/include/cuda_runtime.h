// What nvcc makes visible to a .cu file, for the CUDA emulator: the runtime
// API and the kernel language (threadIdx, __syncthreads, warp shuffles, ...).
// The emulated build compiles each .cu of inner/cuda/ as C++ after this
// header (inner/cuda/emulator/CMakeLists.txt).
#pragma once

#include "cuda_runtime_api.h"
#include "geoloco_kernel_language.h"
