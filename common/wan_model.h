// How long an exchange takes on a modelled wide-area link: the cost model
// `geoloco plan` predicts with and `geoloco simulate` (and the study) charges
// each round, so the two agree. A geolocod round waits for three round
// trips besides its transfer (READY to the coordinator and the PLAN back,
// the all-reduce's two one-way phases, the commit vote and COMMITTED);
// bench/utilization.py checks the model against daemons through
// geoloco-faultproxy. Data parallelism's all-reduce after every step has no
// coordinator: two round trips.
#pragma once

namespace geoloco {

/// RTTs of a geolocod round besides its transfer.
inline constexpr double kRoundTrips = 3;
/// RTTs of data parallelism's all-reduce after each step.
inline constexpr double kDataParallelRoundTrips = 2;

/// round_trips · RTT + the busiest sender's bytes at the link rate, in seconds.
inline double modelled_exchange_seconds(double busiest_bytes, double bandwidth_bits_per_s, double rtt_ms,
                                        double round_trips) {
  return round_trips * rtt_ms / 1000.0 + busiest_bytes * 8.0 / bandwidth_bits_per_s;
}

}  // namespace geoloco
