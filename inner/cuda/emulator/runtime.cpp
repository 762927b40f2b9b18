// The CUDA runtime API of the emulator (include/cuda_runtime_api.h).
#include <sys/sysinfo.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_runtime_api.h"
#include "common/status.h"
#include "inner/cuda/emulator/state.h"

namespace emu = geoloco::cuda_emulator;
using geoloco::cat;

namespace {

bool valid_device(int device) { return device >= 0 && device < emu::device_count(); }

/// The sticky fault, or an invalid stream; cudaSuccess when the call may run.
cudaError_t precheck(const char* call, cudaStream_t stream) {
  if (const cudaError_t e = emu::sticky_error(); e != cudaSuccess) return e;
  if (!emu::is_stream(stream))
    return emu::fail(cudaErrorInvalidResourceHandle, cat(call, ": ", stream, " is not a live stream"));
  return cudaSuccess;
}

}  // namespace

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() { return emu::last_error(true); }
cudaError_t cudaPeekAtLastError() { return emu::last_error(false); }

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return emu::fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null count");
  *count = emu::device_count();
  if (*count == 0)
    return emu::fail(cudaErrorNoDevice, "cudaGetDeviceCount: CUDA_VISIBLE_DEVICES shows none of the emulated devices");
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (const cudaError_t e = emu::sticky_error(); e != cudaSuccess) return e;
  if (!valid_device(device))
    return emu::fail(cudaErrorInvalidDevice, cat("cudaSetDevice(", device, "): no such device"));
  emu::set_current_device(device);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return emu::fail(cudaErrorInvalidValue, "cudaGetDevice: null device");
  *device = emu::current_device();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return emu::fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null prop");
  if (!valid_device(device)) return emu::fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no such device");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "geoloco CUDA emulator (host CPU)");
  struct sysinfo info {};
  if (sysinfo(&info) == 0) prop->totalGlobalMem = static_cast<std::size_t>(info.totalram) * info.mem_unit;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024, prop->maxThreadsDim[1] = 1024, prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff, prop->maxGridSize[1] = 65535, prop->maxGridSize[2] = 65535;
  prop->major = 9, prop->minor = 0;  // what the backend is compiled for (sm_90)
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return emu::fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: null value");
  if (!valid_device(device)) return emu::fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: no such device");
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    case cudaDevAttrClockRate:
      *value = 1000000;
      return cudaSuccess;  // kHz; the emulator has no real clock
    case cudaDevAttrMultiProcessorCount:
      *value = 1;
      return cudaSuccess;
  }
  return emu::fail(cudaErrorInvalidValue,
                   cat("cudaDeviceGetAttribute: attribute ", static_cast<int>(attr), " is not emulated"));
}

cudaError_t cudaDeviceSynchronize() { return emu::sticky_error(); }

cudaError_t cudaMalloc(void** ptr, std::size_t size) {
  if (const cudaError_t e = emu::sticky_error(); e != cudaSuccess) return e;
  if (ptr == nullptr) return emu::fail(cudaErrorInvalidValue, "cudaMalloc: null result pointer");
  *ptr = emu::allocate(size);
  if (*ptr == nullptr) return emu::fail(cudaErrorMemoryAllocation, cat("cudaMalloc: cannot allocate ", size, " bytes"));
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (const cudaError_t e = emu::sticky_error(); e != cudaSuccess) return e;
  if (ptr == nullptr) return cudaSuccess;
  if (!emu::release(ptr))
    return emu::fail(cudaErrorInvalidValue, cat("cudaFree(", ptr, "): not the start of a device allocation"));
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, std::size_t size, cudaStream_t stream) {
  if (const cudaError_t e = precheck("cudaMallocAsync", stream); e != cudaSuccess) return e;
  return cudaMalloc(ptr, size);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (const cudaError_t e = precheck("cudaFreeAsync", stream); e != cudaSuccess) return e;
  return cudaFree(ptr);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t e = precheck("cudaMemcpyAsync", stream); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  const bool dst_device = emu::is_device(dst, count), src_device = emu::is_device(src, count);
  // A pointer that is device memory but whose range runs past its allocation
  // is an overrun, whatever the kind says.
  const bool dst_overrun = !dst_device && emu::is_device(dst, 0), src_overrun = !src_device && emu::is_device(src, 0);
  bool ok = !dst_overrun && !src_overrun;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = ok && !dst_device && !src_device;
      break;
    case cudaMemcpyHostToDevice:
      ok = ok && dst_device && !src_device;
      break;
    case cudaMemcpyDeviceToHost:
      ok = ok && !dst_device && src_device;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = ok && dst_device && src_device;
      break;
    case cudaMemcpyDefault:
      break;
    default:
      ok = false;
  }
  if (!ok)
    return emu::fail(
        cudaErrorInvalidValue,
        cat("cudaMemcpyAsync(", dst, " <- ", src, ", ", count, " bytes, kind ", static_cast<int>(kind),
            "): the destination ", dst_device ? "is" : "is not", " device memory, the source ",
            src_device ? "is" : "is not", dst_overrun || src_overrun ? " (a range runs past its end)" : ""));
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, count, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t count, cudaStream_t stream) {
  if (const cudaError_t e = precheck("cudaMemsetAsync", stream); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  if (!emu::is_device(ptr, count))
    return emu::fail(cudaErrorInvalidValue,
                     cat("cudaMemsetAsync(", ptr, ", ", count, " bytes): not within one device allocation"));
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (const cudaError_t e = emu::sticky_error(); e != cudaSuccess) return e;
  if (attributes == nullptr) return emu::fail(cudaErrorInvalidValue, "cudaPointerGetAttributes: null attributes");
  *attributes = cudaPointerAttributes{};
  if (const int device = emu::device_of(ptr); device >= 0) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = device;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;  // plain host memory, as CUDA 11+ answers
    attributes->device = -2;
  }
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (const cudaError_t e = emu::sticky_error(); e != cudaSuccess) return e;
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0)
    return emu::fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: null stream or unknown flags");
  *stream = emu::create_stream();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || !emu::destroy_stream(stream))
    return emu::fail(cudaErrorInvalidResourceHandle, cat("cudaStreamDestroy: ", stream, " is not a live stream"));
  return cudaSuccess;
}

// Work runs when it is queued, so a stream is always idle.
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return precheck("cudaStreamSynchronize", stream); }
cudaError_t cudaStreamQuery(cudaStream_t stream) { return precheck("cudaStreamQuery", stream); }
