// `geoloco bench allreduce`: N sites over loopback TLS in this process run the
// two-phase all-reduce of an uncompressed fp32 tensor; each site's bytes,
// time and Gbit/s are printed next to the link bound, and next to Gloo's
// ring all-reduce over plain TCP on the same machine in the same run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/status.h"

namespace geoloco::bench {

struct AllReduceBenchOptions {
  int sites = 3;                        ///< sites (threads), 2..16
  std::size_t size_bytes = 256u << 20;  ///< fp32 tensor size in bytes
  double rate_mbit = 0;                 ///< per-site egress cap in Mbit/s; 0 = none
  int repeats = 3;                      ///< timed runs; the fastest counts
  int connections_per_peer = 4;
  int io_threads = 4;  ///< threads per site that run its connections (TransportOptions::io_threads)
  std::uint64_t chunk_elements = 1u << 18;  ///< values per chunk (frame), the transport's default
  bool compare_gloo = true;                 ///< also time Gloo (when built with it), uncapped runs only
  bool plaintext = false;                   ///< plain TCP instead of TLS, to show what TLS costs
};

struct AllReduceBenchRow {
  std::string system;  ///< "geoloco" or "gloo-ring-tcp"
  int sites = 0;
  std::uint64_t size_bytes = 0;
  std::uint64_t bytes_sent = 0;  ///< per site (geoloco: the most any site sent)
  double seconds = 0;            ///< slowest site, fastest of the repeats
  double gbit_per_s = 0;         ///< bytes_sent * 8 / seconds / 1e9, per site
  double bound_seconds = 0;      ///< 2 (N-1)/N * size / rate; 0 without a cap
  double ratio_to_bound = 0;     ///< seconds / bound_seconds; 0 without a cap
  double rate_mbit = 0;
  int io_threads = 0;  ///< geoloco: each site's connection threads
  /// geoloco: CPU seconds (all threads, user + system, the kernel's TCP work
  /// included) per GB that a site sends, over the fastest run. With C cores,
  /// N sites can send at most C / (N x this) GB/s each.
  double cpu_seconds_per_gb = 0;
  unsigned cores = 0;  ///< cores this process may use
};

/// Errors: invalid_argument (options), or the all-reduce's own error.
Result<std::vector<AllReduceBenchRow>> run_allreduce_bench(const AllReduceBenchOptions& options);

void print_allreduce_json(const std::vector<AllReduceBenchRow>& rows, std::ostream& out);
void print_allreduce_table(const std::vector<AllReduceBenchRow>& rows, std::ostream& out);

/// Whether this build can run the Gloo comparison.
bool have_gloo();

}  // namespace geoloco::bench
