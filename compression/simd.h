// Which vector instructions the codecs use, chosen once at run time.
//
// Every vectorized kernel has a scalar twin that produces the same bytes
// (tests/simd_equivalence_test.cpp proves it); the vector path only makes it
// faster. Setting GEOLOCO_SIMD=scalar in the environment forces the scalar
// kernels, e.g. to rule them out when debugging.
#pragma once

#include <string_view>

namespace geoloco::compression {

enum class Simd { scalar, avx2 };

/// Whether this CPU (and OS) can run the AVX2 + F16C kernels.
bool cpu_has_avx2_f16c();

/// The best level this CPU supports (AVX2 + F16C), unless GEOLOCO_SIMD=scalar.
Simd detected_simd();
std::string_view simd_name(Simd simd);

}  // namespace geoloco::compression
