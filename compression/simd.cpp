#include "compression/simd.h"

#include <cstdlib>
#include <cstring>

namespace geoloco::compression {

namespace {
Simd detect() {
  const char* forced = std::getenv("GEOLOCO_SIMD");
  if (forced != nullptr && std::strcmp(forced, "scalar") == 0) return Simd::scalar;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return Simd::avx2;
#endif
  return Simd::scalar;
}
}  // namespace

Simd detected_simd() {
  static const Simd simd = detect();
  return simd;
}

std::string_view simd_name(Simd simd) { return simd == Simd::avx2 ? "avx2" : "scalar"; }

}  // namespace geoloco::compression
