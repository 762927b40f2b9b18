#include "compression/simd.h"

#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace geoloco::compression {

bool cpu_has_avx2_f16c() {
#if defined(__x86_64__)
  // cpuid rather than __builtin_cpu_supports: clang 14 does not know "f16c".
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool f16c = c & (1u << 29), osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!(f16c && osxsave && avx)) return false;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x6u) != 0x6u) return false;  // the OS saves SSE and AVX state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);  // AVX2
#else
  return false;
#endif
}

namespace {
Simd detect() {
  const char* forced = std::getenv("GEOLOCO_SIMD");
  if (forced != nullptr && std::strcmp(forced, "scalar") == 0) return Simd::scalar;
  return cpu_has_avx2_f16c() ? Simd::avx2 : Simd::scalar;
}
}  // namespace

Simd detected_simd() {
  static const Simd simd = detect();
  return simd;
}

std::string_view simd_name(Simd simd) { return simd == Simd::avx2 ? "avx2" : "scalar"; }

}  // namespace geoloco::compression
