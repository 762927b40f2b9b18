// Gloo's ring all-reduce over TCP with N ranks as threads on loopback: the
// baseline `geoloco bench allreduce` prints beside its own figures. Built
// only when Gloo (libgloo-dev) is present (GEOLOCO_HAVE_GLOO).
#pragma once

#include <cstddef>

#include "common/status.h"

namespace geoloco::bench {

/// Seconds of the slowest rank for one all-reduce of `count` floats, the
/// fastest of `repeats`. Errors: internal (Gloo threw), unsupported (no Gloo).
Result<double> gloo_allreduce_seconds(int ranks, std::size_t count, int repeats);

}  // namespace geoloco::bench
