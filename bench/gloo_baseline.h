// Gloo's ring all-reduce over TCP on loopback, with each rank a separate
// process as Gloo is used: the baseline `geoloco bench allreduce` prints
// beside its own figures. Built only when Gloo (libgloo-dev) is present
// (GEOLOCO_HAVE_GLOO).
#pragma once

#include <cstddef>

#include "common/status.h"

namespace geoloco::bench {

/// Seconds of the slowest rank for one all-reduce of `count` floats, the
/// fastest of `repeats`. The ranks are forked from this process and meet in a
/// Gloo FileStore under a temporary directory; each checks its sum and exits.
/// Call it before starting threads of your own: fork copies only the caller,
/// so a lock another thread holds stays held in the rank. (OpenBLAS's pool,
/// the one library thread the CLI has, stops itself around fork.)
/// Errors: internal (a rank failed or Gloo threw), io (mkdtemp, pipe or fork
/// failed).
Result<double> gloo_allreduce_seconds(int ranks, std::size_t count, int repeats);

}  // namespace geoloco::bench
